// The collectives that move bytes without combining them. Each is one
// spcoll op on bytes (uint8), so every dtype moves:
//   broadcast(root)        all_gather, sizes [n at root, 0 elsewhere]
//   all_gather (+ tensor, coalesced forms)
//                          all_gather with each rank's byte count
//   gather(root)           all_to_all_v: each rank sends n to root
//   scatter(root)          all_to_all_v: root sends piece j to rank j
//   all_to_all (+ single)  all_to_all_v in bytes
//   barrier                all_reduce of one int32
#include <c10/util/Exception.h>

#include <cstring>

#include "backend.hpp"
#include "device.hpp"

namespace spcoll {

using WorkPtr = c10::intrusive_ptr<c10d::Work>;

// Copies each piece of a byte run into its tensor, in order.
static std::function<void()> scatter_back(const char* src,
                                          std::vector<at::Tensor> dsts) {
  return [src, dsts = std::move(dsts)] { copy_pieces(src, dsts); };
}

// All-gather of rank j's sizes[j] bytes from x into y (sizes live in p).
static Backend::Op all_gather_op(const char* name, c10d::OpType type,
                                 Span x, Span y, std::unique_ptr<Pending> p,
                                 const std::vector<int64_t>* sizes) {
  spc_op op = spc_op_all_gather(0, sizes ? sizes->data() : nullptr);
  return Backend::Op{name, type, op, SPC_UINT8, x, y, std::move(p)};
}

WorkPtr Backend::broadcast(std::vector<at::Tensor>& ts,
                           const c10d::BroadcastOptions& o) {
  check_live("broadcast");
  FlightMark fm = record("broadcast", ts, ts, o.timeout);
  bool direct;
  int dev = place("broadcast", all_of({&ts}), &direct);
  if (dev >= 0 && !direct)
    return issued(fm, device("broadcast")->call("broadcast", ts, o));
  TORCH_CHECK_VALUE(ts.size() == 1, "spcoll: broadcast takes one tensor");
  at::Tensor t = ts[0];
  int root = (int)o.rootRank;
  auto p = std::make_unique<Pending>();
  p->flight = fm;
  p->dev = dev;
  int64_t n = (int64_t)t.nbytes();
  std::vector<int64_t> sizes(size_, 0);
  sizes[root] = n;
  bool back;
  Span y = out_span(t, *p, &back);
  Span x = y;  // the root's input is its own slot of y: in place
  if (rank_ == root) {
    if (back) {
      copy_from_tensor(y.data, t);
      conn_->counts().staged_in += n;
      conn_->counts().staged_out -= n;  // nothing comes back on the root
    }
    back = false;
  } else {
    x = scratch(0, *p);
  }
  if (back)
    p->finish = [t, src = y.data] { copy_to_tensor(t, src); };
  p->outputs = ts;
  return run(all_gather_op("broadcast", c10d::OpType::BROADCAST, x, y,
                           std::move(p), &sizes),
             !!o.asyncOp, o.timeout);
}

WorkPtr Backend::allgather(std::vector<std::vector<at::Tensor>>& outs,
                           std::vector<at::Tensor>& ins,
                           const c10d::AllgatherOptions& o) {
  check_live("all_gather");
  FlightMark fm = record("all_gather", ins, flat(outs), o.timeout);
  auto ts = all_of({&ins});
  for (const auto& l : outs)
    for (const auto& t : l)
      ts.push_back(&t);
  bool direct;
  int dev = place("all_gather", ts, &direct);
  if (dev >= 0 && !direct)
    return issued(fm, device("all_gather")->call("allgather", outs, ins, o));
  TORCH_CHECK_VALUE(ins.size() == 1 && outs.size() == 1,
                    "spcoll: all_gather takes one input and one output list");
  if ((int)outs[0].size() != size_)
    refuse("all_gather", "needs a list of " + std::to_string(size_) +
                             " output tensors, got " +
                             std::to_string(outs[0].size()));
  std::vector<int64_t> sizes;
  for (const auto& t : outs[0])
    sizes.push_back((int64_t)t.nbytes());
  auto p = std::make_unique<Pending>();
  p->flight = fm;
  p->dev = dev;
  Span x = in_span(ins[0], *p);
  Span y = scratch(bytes_of(outs[0]), *p);
  p->finish = scatter_back(y.data, outs[0]);
  p->outputs = outs[0];
  p->nested = true;
  return run(all_gather_op("all_gather", c10d::OpType::ALLGATHER, x, y,
                           std::move(p), &sizes),
             !!o.asyncOp, o.timeout);
}

WorkPtr Backend::_allgather_base(at::Tensor& out, at::Tensor& in,
                                 const c10d::AllgatherOptions& o) {
  check_live("all_gather_into_tensor");
  FlightMark fm = record("all_gather_into_tensor", {in}, {out}, o.timeout);
  bool direct;
  int dev = place("all_gather_into_tensor", {&out, &in}, &direct);
  if (dev >= 0 && !direct)
    return issued(fm, device("all_gather_into_tensor")->call("_allgather_base", out, in, o));
  if (out.nbytes() != in.nbytes() * (size_t)size_)
    refuse("all_gather_into_tensor",
           "output has " + std::to_string(out.nbytes()) + " bytes, want " +
               std::to_string(size_) + " x " + std::to_string(in.nbytes()));
  auto p = pending(true);
  p->flight = fm;
  p->dev = dev;
  bool back;
  Span y = out_span(out, *p, &back);
  Span x;
  // in exactly this rank's slot of out: in place (NCCL's rule), but for
  // caller memory, which the library takes only apart from the output
  int64_t n = (int64_t)in.nbytes();
  if (!back && !y.wrapped && in.is_contiguous() && n > 0 &&
      (char*)in.data_ptr() == y.data + n * rank_) {
    x = Span{y.buf, y.off + (uint64_t)(n * rank_), y.data + n * rank_, n,
             false, dev};
    p->keep.push_back(in);
  } else {
    x = in_span(in, *p);
  }
  if (back)
    p->finish = [out, src = y.data] { copy_to_tensor(out, src); };
  p->outputs = {out};
  return run(all_gather_op("all_gather_into_tensor",
                           c10d::OpType::_ALLGATHER_BASE, x, y, std::move(p),
                           nullptr),
             !!o.asyncOp, o.timeout);
}

WorkPtr Backend::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outs,
                                     std::vector<at::Tensor>& ins,
                                     const c10d::AllgatherOptions& o) {
  check_live("all_gather_coalesced");
  FlightMark fm = record("all_gather_coalesced", ins, flat(outs), o.timeout);
  TORCH_CHECK_VALUE(!any_cuda(outs) && !any_cuda(ins),
                    "spcoll: all_gather_coalesced takes CPU tensors");
  if ((int)outs.size() != size_)
    refuse("all_gather_coalesced",
           "needs " + std::to_string(size_) + " output lists (one per rank), "
           "got " + std::to_string(outs.size()));
  auto p = std::make_unique<Pending>();
  p->flight = fm;
  int64_t nin = bytes_of(ins);
  Span x = scratch(nin, *p);
  char* q = x.data;
  for (const auto& t : ins) {
    copy_from_tensor(q, t);
    q += t.nbytes();
  }
  std::vector<int64_t> sizes;
  std::vector<at::Tensor> flat;
  for (auto& l : outs) {
    sizes.push_back(bytes_of(l));
    flat.insert(flat.end(), l.begin(), l.end());
  }
  int64_t total = 0;
  for (auto s : sizes)
    total += s;
  Span y = scratch(total, *p);
  p->finish = scatter_back(y.data, flat);
  p->outputs = flat;
  return run(all_gather_op("all_gather_coalesced",
                           c10d::OpType::ALLGATHER_COALESCED, x, y,
                           std::move(p), &sizes),
             !!o.asyncOp, o.timeout);
}

WorkPtr Backend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outs, std::vector<at::Tensor>& ins,
    const c10d::AllgatherOptions& o) {
  check_live("all_gather_into_tensor_coalesced");
  FlightMark fm = record("all_gather_into_tensor_coalesced", ins, outs, o.timeout);
  if (any_cuda(outs) || any_cuda(ins))
    return issued(fm, device("all_gather_into_tensor_coalesced")
        ->call("allgather_into_tensor_coalesced", outs, ins, o));
  if (outs.size() != ins.size())
    refuse("all_gather_into_tensor_coalesced",
           std::to_string(outs.size()) + " outputs for " +
               std::to_string(ins.size()) + " inputs");
  for (size_t i = 0; i < ins.size(); i++)
    if (outs[i].nbytes() != ins[i].nbytes() * (size_t)size_)
      refuse("all_gather_into_tensor_coalesced",
             "output " + std::to_string(i) + " has " +
                 std::to_string(outs[i].nbytes()) + " bytes, want " +
                 std::to_string(size_) + " x " +
                 std::to_string(ins[i].nbytes()));
  // one all_gather of the inputs back to back; rank j's block holds its
  // input i at the same offset on every rank
  auto p = std::make_unique<Pending>();
  p->flight = fm;
  int64_t nin = bytes_of(ins);
  Span x = scratch(nin, *p);
  char* q = x.data;
  for (const auto& t : ins) {
    copy_from_tensor(q, t);
    q += t.nbytes();
  }
  Span y = scratch(nin * size_, *p);
  std::vector<at::Tensor> o_ = outs, i_ = ins;
  int w = size_;
  p->finish = [y = y.data, o_, i_, nin, w] {
    int64_t off = 0;
    for (size_t i = 0; i < i_.size(); i++) {
      int64_t n = (int64_t)i_[i].nbytes();
      at::Tensor flat = o_[i].is_contiguous() ? o_[i] : at::empty_like(o_[i]);
      for (int j = 0; j < w; j++)
        std::memcpy((char*)flat.data_ptr() + n * j, y + nin * j + off, n);
      if (!o_[i].is_contiguous())
        o_[i].copy_(flat);
      off += n;
    }
  };
  p->outputs = outs;
  return run(all_gather_op("all_gather_into_tensor_coalesced",
                           c10d::OpType::ALLGATHER_INTO_TENSOR_COALESCED, x, y,
                           std::move(p), nullptr),
             !!o.asyncOp, o.timeout);
}

// all_to_all_v of bytes: this rank sends in_b[j] bytes to rank j and
// receives out_b[j] from it.
// The list of one tensor per rank that gather's root passes as outputs
// and scatter's as inputs (`what`); refused on every rank when it is not.
static void one_per_rank(Backend& b, const char* name,
                         const std::vector<std::vector<at::Tensor>>& lists,
                         const char* what) {
  if (lists.size() != 1 || (int)lists[0].size() != b.size())
    b.refuse(name, "needs a list of " + std::to_string(b.size()) + " " +
                       what + " tensors on the root");
}

static Backend::Op a2av_op(const char* name, c10d::OpType type, Span x,
                           Span y, std::unique_ptr<Pending> p,
                           const std::vector<int64_t>& in_b,
                           const std::vector<int64_t>& out_b) {
  spc_op op = spc_op_all_to_all_v(in_b.data(), out_b.data());
  return Backend::Op{name, type, op, SPC_UINT8, x, y, std::move(p)};
}

WorkPtr Backend::gather(std::vector<std::vector<at::Tensor>>& outs,
                        std::vector<at::Tensor>& ins,
                        const c10d::GatherOptions& o) {
  check_live("gather");
  FlightMark fm = record("gather", ins, flat(outs), o.timeout);
  if (any_cuda(outs) || any_cuda(ins))
    return issued(fm, device("gather")->call("gather", outs, ins, o));
  TORCH_CHECK_VALUE(ins.size() == 1, "spcoll: gather takes one input");
  int root = (int)o.rootRank;
  bool is_root = rank_ == root;
  if (is_root)
    one_per_rank(*this, "gather", outs, "output");
  auto p = std::make_unique<Pending>();
  p->flight = fm;
  int64_t n = (int64_t)ins[0].nbytes();
  std::vector<int64_t> in_b(size_, 0), out_b(size_, 0);
  in_b[root] = n;
  if (is_root)
    for (int j = 0; j < size_; j++)
      out_b[j] = (int64_t)outs[0][j].nbytes();
  Span x = in_span(ins[0], *p);
  Span y = scratch(is_root ? bytes_of(outs[0]) : 0, *p);
  if (is_root) {
    p->finish = scatter_back(y.data, outs[0]);
    p->outputs = outs[0];
    p->nested = true;
  }
  return run(a2av_op("gather", c10d::OpType::GATHER, x, y, std::move(p), in_b,
                     out_b),
             !!o.asyncOp, o.timeout);
}

WorkPtr Backend::scatter(std::vector<at::Tensor>& outs,
                         std::vector<std::vector<at::Tensor>>& ins,
                         const c10d::ScatterOptions& o) {
  check_live("scatter");
  FlightMark fm = record("scatter", flat(ins), outs, o.timeout);
  if (any_cuda(outs) || any_cuda(ins))
    return issued(fm, device("scatter")->call("scatter", outs, ins, o));
  TORCH_CHECK_VALUE(outs.size() == 1, "spcoll: scatter takes one output");
  int root = (int)o.rootRank;
  bool is_root = rank_ == root;
  if (is_root)
    one_per_rank(*this, "scatter", ins, "input");
  auto p = std::make_unique<Pending>();
  p->flight = fm;
  std::vector<int64_t> in_b(size_, 0), out_b(size_, 0);
  out_b[root] = (int64_t)outs[0].nbytes();
  Span x;
  if (is_root) {
    x = scratch(bytes_of(ins[0]), *p);
    char* q = x.data;
    for (int j = 0; j < size_; j++) {
      in_b[j] = (int64_t)ins[0][j].nbytes();
      copy_from_tensor(q, ins[0][j]);
      q += in_b[j];
    }
  } else {
    x = scratch(0, *p);
  }
  bool back;
  Span y = out_span(outs[0], *p, &back);
  if (back)
    p->finish = [t = outs[0], src = y.data] { copy_to_tensor(t, src); };
  p->outputs = outs;
  return run(a2av_op("scatter", c10d::OpType::SCATTER, x, y, std::move(p),
                     in_b, out_b),
             !!o.asyncOp, o.timeout);
}

// Split sizes along dim 0 (rows) as bytes; empty: equal rows.
static std::vector<int64_t> split_bytes(Backend& b, const char* what,
                                        const at::Tensor& t,
                                        const std::vector<int64_t>& splits) {
  int w = b.size();
  int64_t rows = t.dim() ? t.size(0) : 1;
  int64_t row_b = rows ? (int64_t)t.nbytes() / rows : 0;
  std::vector<int64_t> out;
  if (splits.empty()) {
    if (rows % w)
      b.refuse("all_to_all_single",
               std::string(what) + " has " + std::to_string(rows) +
                   " rows, not divisible by " + std::to_string(w) +
                   " (pass split sizes)");
    out.assign(w, rows / w * row_b);
    return out;
  }
  int64_t sum = 0;
  for (auto s : splits)
    sum += s;
  if ((int)splits.size() != w || sum != rows)
    b.refuse("all_to_all_single",
             std::string(what) + " split sizes do not cut its " +
                 std::to_string(rows) + " rows in " + std::to_string(w));
  for (auto s : splits)
    out.push_back(s * row_b);
  return out;
}

WorkPtr Backend::alltoall_base(at::Tensor& out, at::Tensor& in,
                               std::vector<int64_t>& out_splits,
                               std::vector<int64_t>& in_splits,
                               const c10d::AllToAllOptions& o) {
  check_live("all_to_all_single");
  FlightMark fm = record("all_to_all_single", {in}, {out}, o.timeout);
  bool direct;
  int dev = place("all_to_all_single", {&out, &in}, &direct);
  if (dev >= 0 && !direct)
    return issued(fm, device("all_to_all_single")
        ->call("alltoall_base", out, in, out_splits, in_splits, o));
  auto in_b = split_bytes(*this, "input", in, in_splits);
  auto out_b = split_bytes(*this, "output", out, out_splits);
  auto p = pending(true);
  p->flight = fm;
  p->dev = dev;
  Span x = in_span(in, *p);
  bool back;
  Span y = out_span(out, *p, &back);
  if (back)
    p->finish = [out, src = y.data] { copy_to_tensor(out, src); };
  p->outputs = {out};
  return run(a2av_op("all_to_all_single", c10d::OpType::ALLTOALL_BASE, x, y,
                     std::move(p), in_b, out_b),
             !!o.asyncOp, o.timeout);
}

WorkPtr Backend::alltoall(std::vector<at::Tensor>& outs,
                          std::vector<at::Tensor>& ins,
                          const c10d::AllToAllOptions& o) {
  check_live("all_to_all");
  FlightMark fm = record("all_to_all", ins, outs, o.timeout);
  bool direct;
  int dev = place("all_to_all", all_of({&outs, &ins}), &direct);
  if (dev >= 0 && !direct)
    return issued(fm, device("all_to_all")->call("alltoall", outs, ins, o));
  if ((int)outs.size() != size_ || (int)ins.size() != size_)
    refuse("all_to_all", "needs " + std::to_string(size_) +
                             " input and output tensors");
  auto p = std::make_unique<Pending>();
  p->flight = fm;
  p->dev = dev;
  std::vector<int64_t> in_b, out_b;
  Span x = scratch(bytes_of(ins), *p);
  char* q = x.data;
  for (const auto& t : ins) {
    in_b.push_back((int64_t)t.nbytes());
    copy_from_tensor(q, t);
    q += t.nbytes();
  }
  for (const auto& t : outs)
    out_b.push_back((int64_t)t.nbytes());
  Span y = scratch(bytes_of(outs), *p);
  p->finish = scatter_back(y.data, outs);
  p->outputs = outs;
  return run(a2av_op("all_to_all", c10d::OpType::ALLTOALL, x, y, std::move(p),
                     in_b, out_b),
             !!o.asyncOp, o.timeout);
}

WorkPtr Backend::barrier(const c10d::BarrierOptions& o) {
  check_live("barrier");
  FlightMark fm = record("barrier", {}, {}, o.timeout);
  auto p = std::make_unique<Pending>();
  p->flight = fm;
  Span x = scratch(4, *p);
  std::memset(x.data, 0, 4);
  spc_op op = spc_op_all_reduce(SPC_SUM);
  return run(Op{"barrier", c10d::OpType::BARRIER, op, SPC_INT32, x, x,
                std::move(p)},
             !!o.asyncOp, o.timeout);
}

}  // namespace spcoll
