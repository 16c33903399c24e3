// Installs spcoll memory as torch's CPU allocator (opt-in; see
// allocator.cpp for what that changes).
#pragma once

#include <memory>

#include "conn.hpp"

namespace spcoll {

void use_cpu_allocator(std::shared_ptr<Conn> conn);

}  // namespace spcoll
