// Backend: the group, op memory, running one op, point to point.
#include "backend.hpp"
#include "device.hpp"

#include <c10/util/Exception.h>

#include <cstring>
#include <optional>

namespace spcoll {

bool try_wire_dtype(at::ScalarType t, spc_dtype* dt) {
  switch (t) {
    case at::kFloat: *dt = SPC_FLOAT32; return true;
    case at::kDouble: *dt = SPC_FLOAT64; return true;
    case at::kHalf: *dt = SPC_FLOAT16; return true;
    case at::kBFloat16: *dt = SPC_BFLOAT16; return true;
    case at::kChar: *dt = SPC_INT8; return true;
    case at::kByte: *dt = SPC_UINT8; return true;
    case at::kBool: *dt = SPC_UINT8; return true;
    case at::kInt: *dt = SPC_INT32; return true;
    case at::kLong: *dt = SPC_INT64; return true;
    default: return false;
  }
}

spc_dtype wire_dtype(const char* name, at::ScalarType t) {
  spc_dtype dt;
  if (!try_wire_dtype(t, &dt))
    C10_THROW_ERROR(TypeError,
                    std::string("spcoll: ") + name + ": dtype " +
                        c10::toString(t) +
                        " cannot be reduced by spcoll (float32, float64, "
                        "float16, bfloat16, int8, uint8, int32, int64, "
                        "bool can)");
  return dt;
}

// Host tensors by memcpy when contiguous; CUDA ones by torch's copy on
// the current stream (a device-to-device cudaMemcpyAsync when contiguous),
// src and dst then being device addresses.
void copy_to_tensor(const at::Tensor& dst, const void* src) {
  if (dst.numel() == 0)
    return;
  if (dst.is_contiguous() && !dst.is_cuda()) {
    std::memcpy(dst.data_ptr(), src, dst.nbytes());
    return;
  }
  at::NoGradGuard ng;
  dst.copy_(at::from_blob(const_cast<void*>(src), dst.sizes(), dst.options()));
}

void copy_from_tensor(void* dst, const at::Tensor& src) {
  if (src.numel() == 0)
    return;
  if (src.is_contiguous() && !src.is_cuda()) {
    std::memcpy(dst, src.data_ptr(), src.nbytes());
    return;
  }
  at::NoGradGuard ng;
  at::from_blob(dst, src.sizes(), src.options()).copy_(src);
}

void copy_pieces(const char* src, const std::vector<at::Tensor>& dsts) {
  for (const auto& d : dsts) {
    copy_to_tensor(d, src);
    src += d.nbytes();
  }
}

std::vector<const at::Tensor*> all_of(
    std::initializer_list<const std::vector<at::Tensor>*> lists) {
  std::vector<const at::Tensor*> v;
  for (const auto* l : lists)
    for (const auto& t : *l)
      v.push_back(&t);
  return v;
}

std::vector<at::Tensor> flat(const std::vector<std::vector<at::Tensor>>& ls) {
  std::vector<at::Tensor> v;
  for (const auto& l : ls)
    v.insert(v.end(), l.begin(), l.end());
  return v;
}

int64_t bytes_of(const std::vector<at::Tensor>& ts) {
  int64_t n = 0;
  for (const auto& t : ts)
    n += (int64_t)t.nbytes();
  return n;
}

spc_tensor flat_tensor(const Span& s, spc_dtype dt) {
  spc_tensor t{};
  t.buf = s.buf;
  t.offset = s.off;
  t.dtype = dt;
  t.ndim = 1;
  t.shape[0] = s.bytes / (int64_t)spc_dtype_size(dt);
  return t;
}

Backend::Backend(std::shared_ptr<Conn> conn, const std::string& name,
                 int rank, int size, std::chrono::milliseconds timeout,
                 size_t pg_id, std::vector<uint64_t> ranks)
    : c10d::Backend(rank, size),
      conn_(std::move(conn)),
      progress_(std::make_shared<Progress>()),
      name_(name),
      timeout_(timeout),
      flight_(pg_id, std::move(ranks)) {
  Conn::Lock l(*conn_);
  spc_client* c = conn_->client();
  int rc = spc_set_op_timeout(c, timeout.count() > 0 ? timeout.count() : 0);
  if (rc == SPC_OK)
    rc = spc_group_join(c, name.c_str(), size, rank, &g_);
  if (rc < 0)
    std::rethrow_exception(op_error(
        ("join of group " + name + " as rank " + std::to_string(rank) +
         " of " + std::to_string(size)).c_str(),
        rc, spc_last_error(c)));
}

Backend::~Backend() {
  shutdown();
  progress_.reset();  // its waits end: the group was left
}

// destroy_process_group: the ops queued run first, as gloo's do.
void Backend::shutdown() {
  queue_.drain();
  mark_broken("destroyed");
  leave();
}

void Backend::abort() {
  mark_broken("aborted");
  leave_soon();
}

void Backend::mark_broken(const std::string& why) {
  std::lock_guard<std::mutex> s(state_mu_);
  if (broken_.empty())
    broken_ = why;
}

// Leaves the group: the others' ops on it fail, naming this rank.
void Backend::leave() {
  bool left = false;
  {
    Conn::Lock l(*conn_);  // g_ is read under this lock by every op
    if (g_ != nullptr) {
      spc_group_leave(g_);
      g_ = nullptr;
      left = true;
    }
  }
  if (left && device_)
    device_->shutdown();
}

// The group is broken (mark_broken came first): leave it now, unless an op
// of the queue runs, which waits in the group with the client's lock
// released; then the queue leaves it after that op (ops queued behind it
// fail at once, the group being broken). Nothing waits here for an op.
void Backend::leave_soon() {
  if (queue_.on_thread() || queue_.idle()) {
    leave();
    return;
  }
  auto self = c10::intrusive_ptr<Backend>::reclaim_copy(this);
  queue_.push([self] { self->leave(); });
}

Device* Backend::device(const char* name) const {
  if (!device_)
    C10_THROW_ERROR(ValueError,
                    std::string("spcoll: ") + name +
                        ": CUDA tensors, but torch saw no GPU when process "
                        "group " + name_ + " was made");
  return device_.get();
}

// A wait gave up on an op the daemon may still answer: leave the group so
// the other ranks fail instead of waiting, and refuse later ops.
void Backend::lost(const std::string& why) {
  mark_broken(why);
  leave_soon();
}

// A new Work's links back here: the progress thread for its future, and
// (without keeping the backend alive) the group to break when it fails so.
void Backend::attach(Work& w) {
  w.set_progress(progress_);
  c10::weak_intrusive_ptr<Backend> self(
      c10::intrusive_ptr<Backend>::reclaim_copy(this));
  w.set_on_lost([self](const std::string& why) {
    if (auto b = self.lock())
      b->lost(why);
  });
}

void Backend::check_live(const char* name) const {
  std::string why = broken_why();
  if (!why.empty())
    C10_THROW_ERROR(DistBackendError,
                    std::string("spcoll: ") + name + ": " + why);
}

Span Backend::scratch(int64_t bytes, Pending& p) {
  if (p.dev >= 0) {  // from torch's CUDA allocator, on the current stream
    // (from spcoll's pool where SPCOLL_CUDA_DIRECT=0 keeps the rest out)
    at::Tensor t;
    {
      std::optional<PoolScratch> route;
      if (!cuda_direct())
        route.emplace(p.dev);
      t = at::empty({bytes > 0 ? bytes : 1},
                    at::TensorOptions().dtype(at::kByte).device(
                        at::kCUDA, (c10::DeviceIndex)p.dev));
    }
    Span s;
    if (!cuda_take(conn_, t, &s))
      C10_THROW_ERROR(DistBackendError,
                      "spcoll: staging memory from torch's CUDA allocator "
                      "cannot be registered either: " + cuda_refused());
    p.keep.push_back(t);
    s.bytes = bytes;
    return s;
  }
  Arena::Block b = conn_->block(bytes > 0 ? (size_t)bytes : 1);
  p.staged.push_back(std::make_unique<Staged>(conn_, b));
  return Span{b.buf, b.off, static_cast<char*>(b.data()), bytes};
}

// The tensor itself as op memory, when it is contiguous in spcoll memory
// or in a segment of torch's CUDA allocator.
bool Backend::in_place(const at::Tensor& t, Pending& p, Span* s) {
  int64_t n = (int64_t)t.nbytes();
  if (t.is_cuda()) {
    if (!cuda_take(conn_, t, s))
      return false;
  } else {
    spc_buffer* buf;
    uint64_t off;
    if (n == 0 || !t.is_contiguous() ||
        !conn_->arena().locate(t.data_ptr(), n, &buf, &off))
      return false;
    *s = Span{buf, off, static_cast<char*>(t.data_ptr()), n};
  }
  p.keep.push_back(t);
  conn_->counts().direct += n;
  return true;
}

// Caller memory handed to spc_run as it is (spc_buffer_wrap): the other
// ranks read it in this process where the group's fast path reads in
// place, else spc_run stages it. Only for collectives run with spc_run,
// blocking or on the queue (spc_start and P2P refuse it), and from
// kWrapMin bytes: below, a staged op travels
// in the segment's lines and repeats cheaper than a record per op. A
// tensor that overlaps another one of the op (the same tensor as input
// and output of an all_to_all, say) is staged: the library takes only
// apart tensors, or an all_reduce's one span for both, which the caller
// passes as one Span.
static constexpr int64_t kWrapMin = 32 << 10;

bool Backend::wrap(const at::Tensor& t, Pending& p, Span* s) {
  int64_t n = (int64_t)t.nbytes();
  if (!p.may_wrap || n < kWrapMin || !t.is_contiguous() || t.is_cuda())
    return false;
  char* a = static_cast<char*>(t.data_ptr());
  for (auto& w : p.wrapped) {
    char* b = static_cast<char*>(spc_buffer_data(w->buf));
    int64_t m = (int64_t)spc_buffer_size(w->buf);
    if (a < b + m && b < a + n)
      return false;
  }
  spc_buffer* buf = nullptr;
  {
    Conn::Lock l(*conn_);
    if (spc_buffer_wrap(conn_->client(), a, (size_t)n, &buf) < 0)
      return false;  // cannot be for a live tensor: staged then
  }
  p.wrapped.push_back(std::make_unique<Wrapped>(conn_, buf));
  p.keep.push_back(t);
  conn_->counts().wrapped += n;
  *s = Span{buf, 0, a, n, true};
  return true;
}

Span Backend::in_span(const at::Tensor& t, Pending& p) {
  Span s;
  if (in_place(t, p, &s) || wrap(t, p, &s))
    return s;
  s = scratch((int64_t)t.nbytes(), p);
  copy_from_tensor(s.data, t);
  conn_->counts().staged_in += t.nbytes();
  return s;
}

Span Backend::out_span(const at::Tensor& t, Pending& p, bool* back) {
  Span s;
  *back = !in_place(t, p, &s) && !wrap(t, p, &s);
  if (!*back)
    return s;
  conn_->counts().staged_out += t.nbytes();
  return scratch((int64_t)t.nbytes(), p);
}

// f(group) with the client's lock held; a destroyed group fails with
// SPC_EINVAL. *msg gets the library's message of a failure.
int Backend::locked(const std::function<int(spc_group*)>& f,
                    std::string* msg) {
  queue_.drain();  // the group's async ops first, in the caller's order
  Conn::Lock l(*conn_);
  if (g_ == nullptr) {
    *msg = "process group " + name_ + " was destroyed";
    return SPC_EINVAL;
  }
  int rc = f(g_);
  if (rc < 0)
    *msg = spc_last_error(conn_->client());
  return rc;
}

// A blocking op that succeeds returns no Work: torch then waits on none
// (distributed_c10d: "the backend has sync'ed at CPP level"), which saves
// making one and the call to wait it. A failed one throws here.
c10::intrusive_ptr<c10d::Work> Backend::run(Op o, bool async,
                                            std::chrono::milliseconds timeout) {
  if (o.p->dev >= 0)
    return run_device(o, async);
  if (async)
    return run_queued(o, timeout);
  spc_tensor x = flat_tensor(o.x, o.dt), y = flat_tensor(o.y, o.dt);
  std::string msg;
  int rc = locked([&](spc_group* g) { return spc_run(g, &o.op, &x, &y); },
                  &msg);
  finish_sync(o, rc, msg);
  return {};
}

// An op's size lists, owned: the caller's die when its call returns.
struct QueuedOp {
  spc_op op;
  spc_dtype dt;
  Span x, y;
  std::vector<int64_t> sizes, sizes2;
  QueuedOp(const Backend::Op& o, int world) : op(o.op), dt(o.dt), x(o.x), y(o.y) {
    own(op.sizes, op.nsizes, world, &sizes);
    own(op.sizes2, op.nsizes2, world, &sizes2);
  }
  static void own(const int64_t*& list, int n, int world,
                  std::vector<int64_t>* v) {
    if (list == nullptr)
      return;
    v->assign(list, list + (n > 0 ? n : world));
    list = v->data();
  }
};

// An async op on CPU tensors: run with spc_run on the group's queue, in
// place where its tensors allow (caller memory included), completing its
// Work there. A group broken meanwhile fails the ops still queued.
c10::intrusive_ptr<c10d::Work> Backend::run_queued(
    Op& o, std::chrono::milliseconds timeout) {
  auto w = c10::make_intrusive<Work>(conn_, rank_, o.type, o.name,
                                     timeout_of(timeout), std::move(o.p));
  attach(*w);
  w->set_queued();
  auto job = std::make_shared<QueuedOp>(o, size_);
  auto self = c10::intrusive_ptr<Backend>::reclaim_copy(this);
  queue_.push([self, w, job] {
    std::string msg = self->broken_why();
    int rc = SPC_EABORTED;
    if (msg.empty()) {
      spc_tensor x = flat_tensor(job->x, job->dt);
      spc_tensor y = flat_tensor(job->y, job->dt);
      rc = self->locked(
          [&](spc_group* g) { return spc_run(g, &job->op, &x, &y); }, &msg);
    }
    w->finish_queued(rc < 0 ? rc : SPC_OK, msg);
  });
  return w;
}

std::string Backend::broken_why() const {
  std::lock_guard<std::mutex> s(state_mu_);
  if (broken_.empty())
    return "";
  return "process group " + name_ + " is broken (" + broken_ +
         "); create a new one";
}

// An op whose call returned rc: its error thrown (the group marked lost
// when the failure broke it), else its local step run.
void Backend::finish_sync(Op& o, int rc, const std::string& msg) {
  if (rc < 0) {
    if (breaks_group(rc))
      lost(std::string(o.name) + ": " + status_text(rc, msg));
    std::rethrow_exception(op_error(o.name, rc, msg));
  }
  if (o.p->finish)
    o.p->finish();
  o.p->flight.done();
}

// A CUDA op, queued on torch's current stream both ways (the daemon
// starts after the work queued on it so far; what is queued on it next
// runs after the daemon's work), then its local step on that stream.
// The host does not wait for the GPU: where the stream flags work a
// failure comes back with a later op (NCCL's asynchronous errors). The
// tensors may be freed at once: torch's allocator reuses their blocks in
// that stream's order, and gives no segment back to CUDA before the
// daemon is done with it (cuda.hpp).
c10::intrusive_ptr<c10d::Work> Backend::run_device(Op& o, bool async) {
  spc_tensor x = flat_tensor(o.x, o.dt), y = flat_tensor(o.y, o.dt);
  void* stream = cuda_stream(o.p->dev);
  std::string msg;
  int rc = locked(
      [&](spc_group* g) {
        spc_request* req = nullptr;
        int r = spc_start_on_stream(g, &o.op, &x, &y, stream, &req);
        return r < 0 ? r : spc_wait_on_stream(&req, stream);
      },
      &msg);
  finish_sync(o, rc, msg);
  if (!async)
    return {};
  return cuda_work(o.type, o.p->dev, o.p->outputs);
}

int Backend::place(const char* name, const std::vector<const at::Tensor*>& ts,
                   bool* direct) {
  int dev = -2;
  bool pooled = true, in_pool = false;  // every tensor / some tensor
  for (const at::Tensor* t : ts) {
    int d = t->is_cuda() ? (int)t->get_device() : -1;
    TORCH_CHECK_VALUE(t->is_cuda() || t->device().is_cpu(), "spcoll: ", name,
                      ": a tensor is on device '", t->device(),
                      "'; only CPU and CUDA tensors are supported");
    if (dev == -2 || dev == d) {
      dev = d;
      bool held = d >= 0 && t->nbytes() > 0 && !cuda_direct() &&
                  cuda_pool_holds(*t);
      in_pool = in_pool || held;
      pooled = pooled && d >= 0 && (t->nbytes() == 0 || held);
      continue;
    }
    C10_THROW_ERROR(ValueError,
                    std::string("spcoll: ") + name + ": tensors on " +
                        (dev < 0 ? "cpu" : "cuda:" + std::to_string(dev)) +
                        " and " +
                        (d < 0 ? "cpu" : "cuda:" + std::to_string(d)) +
                        " mix host and device memory or GPUs; an op's "
                        "tensors must all be on the CPU or all on one GPU");
  }
  *direct = dev >= 0 && (cuda_direct() || (pooled && in_pool));
  if (dev >= 0)
    *direct = agree_direct(name, *direct);
  return dev < 0 ? -1 : dev;
}

// The ranks of a CUDA op must take one path: in place here (this group) or
// the Python backend's device path (a second group); else each waits in
// its own group for the others until the timeout. Where every rank's
// cuda_direct() holds, every CUDA op is direct everywhere: asked once, at
// the first. Otherwise (SPCOLL_CUDA_DIRECT=0 on some rank, where only
// pool tensors go in place) each CUDA op asks: an
// all_reduce MIN of one int on the host, a wait for the other ranks' hosts
// to reach the op.
bool Backend::agree_direct(const char* name, bool mine) {
  if (all_direct_ < 0)
    all_direct_ = min_over_ranks(name, cuda_direct() ? 1 : 0);
  if (all_direct_ == 1)
    return mine;
  return min_over_ranks(name, mine ? 1 : 0) == 1;
}

int Backend::min_over_ranks(const char* name, int v) {
  auto p = pending(true);
  Span x = scratch(4, *p), y = scratch(4, *p);
  std::memcpy(x.data, &v, 4);
  spc_tensor tx = flat_tensor(x, SPC_INT32), ty = flat_tensor(y, SPC_INT32);
  spc_op op = spc_op_all_reduce(SPC_MIN);
  std::string msg;
  int rc = locked([&](spc_group* g) { return spc_run(g, &op, &tx, &ty); },
                  &msg);
  if (rc < 0) {
    if (breaks_group(rc))
      lost(std::string(name) + ": " + status_text(rc, msg));
    std::rethrow_exception(op_error(name, rc, msg));
  }
  int out;
  std::memcpy(&out, y.data, 4);
  return out;
}

[[noreturn]] void Backend::refuse(const char* name, const std::string& why) {
  // An all_reduce whose output is too small: the daemon fails it on every
  // rank, naming this rank; the others then see this rank's reason.
  std::string what = std::string(name) + " (rank " + std::to_string(rank_) +
                     ": " + why.substr(0, 120) + ")";
  {
    auto p = std::make_unique<Pending>();
    Span x = scratch(4, *p), y = scratch(8, *p);
    std::memset(x.data, 0, 4);
    spc_tensor tx = flat_tensor(x, SPC_INT32), ty = flat_tensor(y, SPC_INT32);
    spc_op op = spc_op_all_reduce(SPC_SUM);
    std::string msg;  // it fails: that is its purpose
    (void)locked([&](spc_group* g) { return spc_run(g, &op, &tx, &ty); },
                 &msg);
  }
  C10_THROW_ERROR(ValueError, "spcoll: " + what);
}

c10::intrusive_ptr<c10d::Work> Backend::p2p(bool send, at::Tensor& t,
                                            int peer, int tag) {
  const char* name = send ? "send" : "recv";
  check_live(name);
  std::vector<at::Tensor> ts{t}, none;
  FlightMark fm = record(name, send ? ts : none, send ? none : ts,
                         std::chrono::milliseconds(-1), true);
  if (t.is_cuda()) {
    if (send)
      return issued(fm, device(name)->call("send", ts, peer, tag));
    if (peer == SPC_ANY_SOURCE)
      return issued(fm, device(name)->call("recv_anysource", ts, tag));
    return issued(fm, device(name)->call("recv", ts, peer, tag));
  }
  if (peer != SPC_ANY_SOURCE && (peer < 0 || peer >= size_ || peer == rank_))
    C10_THROW_ERROR(ValueError,
                    std::string("spcoll: ") + name + ": peer rank " +
                        std::to_string(peer) + " is not another rank of this "
                        "group of " + std::to_string(size_) + " (this is rank " +
                        std::to_string(rank_) + ")");
  auto p = std::make_unique<Pending>();
  p->flight = fm;
  bool back = false;
  Span s = send ? in_span(t, *p) : out_span(t, *p, &back);
  if (back) {
    char* src = s.data;
    at::Tensor dst = t;
    p->finish = [dst, src] { copy_to_tensor(dst, src); };
  }
  p->outputs = {t};
  // in elements of the tensor's dtype where spcoll has it, so that the
  // daemon's mismatch message counts elements; other dtypes as bytes
  spc_dtype dt = SPC_UINT8;
  (void)try_wire_dtype(t.scalar_type(), &dt);
  spc_tensor st = flat_tensor(s, dt);
  auto type = send ? c10d::OpType::SEND
                   : (peer == SPC_ANY_SOURCE ? c10d::OpType::RECVANYSOURCE
                                             : c10d::OpType::RECV);
  auto w = c10::make_intrusive<Work>(conn_, rank_, type, name, timeout_,
                                     std::move(p));
  attach(*w);
  std::string msg;
  spc_request* req = nullptr;
  int rc = locked(
      [&](spc_group* g) {
        return send ? spc_start_send(g, &st, peer, tag, &req)
                    : spc_start_recv(g, &st, peer, tag, w->source_slot(), &req);
      },
      &msg);
  if (rc < 0)
    w->start_failed(rc, msg);
  else
    w->set_request(req);
  return w;
}

c10::intrusive_ptr<c10d::Work> Backend::send(std::vector<at::Tensor>& ts,
                                             int dst, int tag) {
  TORCH_CHECK_VALUE(ts.size() == 1, "spcoll: send takes one tensor");
  return p2p(true, ts[0], dst, tag);
}

c10::intrusive_ptr<c10d::Work> Backend::recv(std::vector<at::Tensor>& ts,
                                             int src, int tag) {
  TORCH_CHECK_VALUE(ts.size() == 1, "spcoll: recv takes one tensor");
  return p2p(false, ts[0], src, tag);
}

c10::intrusive_ptr<c10d::Work> Backend::recvAnysource(
    std::vector<at::Tensor>& ts, int tag) {
  TORCH_CHECK_VALUE(ts.size() == 1, "spcoll: recv takes one tensor");
  return p2p(false, ts[0], SPC_ANY_SOURCE, tag);
}

}  // namespace spcoll
