// The collectives that combine values. How each runs:
//   SUM, MIN, MAX             the daemon's all_reduce / reduce_scatter
//   AVG                       SUM, then / group size (floating point only)
//   PREMUL_SUM                x * factor on a staged copy, then SUM
//   PRODUCT, BAND, BOR, BXOR  all_gather, then a local fold in rank order
//   bool                      as uint8: SUM/MAX/BOR are MAX, MIN/PRODUCT/
//                             BAND are MIN (NCCL's logical or/and)
//   reduce(root) SUM          reduce_scatter, sizes [n at root, 0 elsewhere]
//   reduce_scatter MIN/MAX    all_reduce, then this rank's piece
#include <c10/util/Exception.h>

#include <cstring>

#include "backend.hpp"
#include "device.hpp"

namespace spcoll {

using WorkPtr = c10::intrusive_ptr<c10d::Work>;
using R = c10d::ReduceOp;

RedPlan Backend::plan_reduce(const char* name, const c10d::ReduceOp& op,
                             at::ScalarType dt) {
  RedPlan rp;
  rp.move = dt == at::kBool ? at::kByte : dt;
  rp.wire = wire_dtype(name, dt);
  bool fp = at::isFloatingType(dt);
  auto k = op.op_;
  auto bad = [&](const char* why) {
    C10_THROW_ERROR(TypeError, std::string("spcoll: ") + name + ": " + why +
                                   ", got " + c10::toString(dt));
  };
  if (dt == at::kBool) {
    if (k == R::AVG || k == R::PREMUL_SUM)
      bad("ReduceOp.AVG and PREMUL_SUM need a floating-point tensor");
    if (k == R::SUM || k == R::MAX || k == R::BOR)
      k = R::MAX;
    else if (k == R::MIN || k == R::PRODUCT || k == R::BAND)
      k = R::MIN;
  } else if ((k == R::AVG || k == R::PREMUL_SUM) && !fp) {
    bad("ReduceOp.AVG and PREMUL_SUM need a floating-point tensor");
  } else if ((k == R::BAND || k == R::BOR || k == R::BXOR) && fp) {
    bad("bitwise ReduceOps need an integer tensor");
  }
  switch (k) {
    case R::SUM: rp.red = SPC_SUM; break;
    case R::AVG: rp.red = SPC_SUM, rp.avg = true; break;
    case R::PREMUL_SUM: rp.red = SPC_SUM, rp.premul = op.supplement_; break;
    case R::MIN: rp.red = SPC_MIN; break;
    case R::MAX: rp.red = SPC_MAX; break;
    default: rp.local = true, rp.fold = k; break;
  }
  return rp;
}

namespace {

at::Tensor view(const void* data, int64_t count, at::ScalarType t,
                int dev = -1) {
  auto o = at::TensorOptions().dtype(t);
  if (dev >= 0)
    o = o.device(at::kCUDA, (c10::DeviceIndex)dev);
  return at::from_blob(const_cast<void*>(data), {count}, o);
}

void premultiply(const RedPlan& rp, char* data, int64_t count) {
  if (!rp.premul)
    return;
  auto* s = dynamic_cast<c10d::PreMulSumSupplement*>(rp.premul.get());
  TORCH_CHECK_VALUE(s != nullptr, "spcoll: PREMUL_SUM without its factor");
  at::Tensor v = view(data, count, rp.move);
  if (s->tensor_factor.defined())
    v.mul_(s->tensor_factor.to(at::kCPU));
  else
    v.mul_(s->double_factor);
}

void average(const RedPlan& rp, char* data, int64_t count, int w) {
  if (rp.avg)
    view(data, count, rp.move, rp.dev).div_(w);
}

// out = rows[0] op rows[1] op ... (w rows of count elements, in order).
void fold(const RedPlan& rp, const char* rows, int64_t count, int w,
          char* out) {
  int64_t rb = count * (int64_t)at::elementSize(rp.move);
  at::Tensor acc = view(out, count, rp.move);
  std::memcpy(out, rows, rb);
  for (int j = 1; j < w; j++) {
    at::Tensor r = view(rows + rb * j, count, rp.move);
    switch (rp.fold) {
      case R::PRODUCT: acc.mul_(r); break;
      case R::BAND: acc.bitwise_and_(r); break;
      case R::BOR: acc.bitwise_or_(r); break;
      default: acc.bitwise_xor_(r); break;
    }
  }
}

}  // namespace

// Where a reduction's CUDA tensors go: the Python backend's device path
// for what runs on the host here (a local fold, PREMUL_SUM's scaling) or
// when this process's CUDA memory cannot go in place.
static bool python_path(int dev, bool direct, const RedPlan& rp) {
  return dev >= 0 && (!direct || rp.local || rp.premul);
}

// The reduction of x (count elements) over the group. sizes null: every
// rank gets all of it; else rank j gets piece j of sizes (elements).
// `put` receives this rank's result (in staging) once the op is over.
static WorkPtr reduce_core(Backend& b, const char* name, c10d::OpType type,
                           const RedPlan& rp, Span x, int64_t count,
                           const std::vector<int64_t>* sizes,
                           std::unique_ptr<Pending> p,
                           std::function<void(const char*)> put, bool async,
                           std::chrono::milliseconds timeout,
                           const at::Tensor& out = at::Tensor()) {
  int w = b.size(), r = b.rank();
  int64_t es = (int64_t)at::elementSize(rp.move), off = 0, mine = count;
  if (sizes != nullptr) {
    for (int j = 0; j < r; j++)
      off += (*sizes)[j];
    mine = (*sizes)[r];
  }
  if (rp.local) {
    Span g = b.scratch(count * es * w, *p);
    p->finish = [rp, g, count, w, off, es, put] {
      std::vector<char> acc(count * es);
      fold(rp, g.data, count, w, acc.data());
      put(acc.data() + off * es);
    };
    spc_op op = spc_op_all_gather(0, nullptr);
    return b.run(Backend::Op{name, type, op, rp.wire, x, g, std::move(p)},
                 async, timeout);
  }
  bool scatter = sizes != nullptr && rp.red == SPC_SUM;
  // a reduce_scatter writes this rank's piece straight into `out` when
  // that is one tensor in spcoll memory
  bool back = true;
  Span y = scatter && out.defined() ? b.out_span(out, *p, &back)
                                    : b.scratch((scatter ? mine : count) * es, *p);
  int64_t at = scatter ? 0 : off;
  p->finish = [rp, y, at, mine, es, w, put, back] {
    average(rp, y.data + at * es, mine, w);
    if (back)
      put(y.data + at * es);
  };
  spc_op op = scatter ? spc_op_reduce_scatter(0, sizes->data())
                      : spc_op_all_reduce(rp.red);
  return b.run(Backend::Op{name, type, op, rp.wire, x, y, std::move(p)}, async,
               timeout);
}

WorkPtr Backend::allreduce(std::vector<at::Tensor>& ts,
                           const c10d::AllreduceOptions& o) {
  check_live("all_reduce");
  FlightMark fm = record("all_reduce", ts, ts, o.timeout);
  bool direct;
  int dev = place("all_reduce", all_of({&ts}), &direct);
  TORCH_CHECK_VALUE(ts.size() == 1, "spcoll: all_reduce takes one tensor");
  at::Tensor t = ts[0];
  RedPlan rp = plan_reduce("all_reduce", o.reduceOp, t.scalar_type());
  if (python_path(dev, direct, rp))
    return issued(fm, device("all_reduce")->call("allreduce", ts, o));
  rp.dev = dev;
  auto p = pending(!rp.premul);
  p->flight = fm;
  p->dev = dev;
  p->outputs = ts;
  int64_t count = t.numel();
  if (rp.local) {
    Span x = in_span(t, *p);
    return reduce_core(*this, "all_reduce", c10d::OpType::ALLREDUCE, rp, x,
                       count, nullptr, std::move(p),
                       [t](const char* res) { copy_to_tensor(t, res); },
                       !!o.asyncOp, o.timeout);
  }
  // in place: on the tensor itself when it is in spcoll memory, else on
  // one staged copy that goes back after
  bool back;
  Span y = out_span(t, *p, &back);
  if (back) {
    copy_from_tensor(y.data, t);
    conn_->counts().staged_in += t.nbytes();
  }
  premultiply(rp, y.data, count);
  int w = size_;
  p->finish = [rp, y, count, w, back, t] {
    average(rp, y.data, count, w);
    if (back)
      copy_to_tensor(t, y.data);
  };
  return run(Op{"all_reduce", c10d::OpType::ALLREDUCE,
                spc_op_all_reduce(rp.red), rp.wire, y, y, std::move(p)},
             !!o.asyncOp, o.timeout);
}

// The tensors of ts back to back in one staged run (one dtype).
static Span stage_all(Backend& b, const char* name,
                      const std::vector<at::Tensor>& ts, Pending& p) {
  for (const auto& t : ts)
    if (t.scalar_type() != ts[0].scalar_type())
      b.refuse(name, "needs one dtype, got " +
                         std::string(c10::toString(ts[0].scalar_type())) +
                         " and " + c10::toString(t.scalar_type()));
  Span x = b.scratch(bytes_of(ts), p);
  char* q = x.data;
  for (const auto& t : ts) {
    copy_from_tensor(q, t);
    q += t.nbytes();
  }
  return x;
}

WorkPtr Backend::allreduce_coalesced(std::vector<at::Tensor>& ts,
                                     const c10d::AllreduceCoalescedOptions& o) {
  const char* name = "all_reduce_coalesced";
  check_live(name);
  FlightMark fm = record(name, ts, ts, o.timeout);
  bool direct;
  int dev = place(name, all_of({&ts}), &direct);
  TORCH_CHECK_VALUE(!ts.empty(), "spcoll: ", name, " needs tensors");
  RedPlan rp = plan_reduce(name, o.reduceOp, ts[0].scalar_type());
  if (python_path(dev, direct, rp))
    return issued(fm, device(name)->call("allreduce_coalesced", ts, o));
  rp.dev = dev;
  auto p = std::make_unique<Pending>();
  p->flight = fm;
  p->dev = dev;
  Span x = stage_all(*this, name, ts, *p);
  int64_t count = x.bytes / (int64_t)at::elementSize(rp.move);
  premultiply(rp, x.data, count);
  p->outputs = ts;
  std::vector<at::Tensor> dst = ts;
  return reduce_core(*this, name, c10d::OpType::ALLREDUCE_COALESCED, rp, x,
                     count, nullptr, std::move(p),
                     [dst](const char* res) { copy_pieces(res, dst); },
                     !!o.asyncOp, o.timeout);
}

WorkPtr Backend::reduce(std::vector<at::Tensor>& ts,
                        const c10d::ReduceOptions& o) {
  check_live("reduce");
  FlightMark fm = record("reduce", ts, ts, o.timeout);
  bool direct;
  int dev = place("reduce", all_of({&ts}), &direct);
  TORCH_CHECK_VALUE(ts.size() == 1, "spcoll: reduce takes one tensor");
  at::Tensor t = ts[0];
  RedPlan rp = plan_reduce("reduce", o.reduceOp, t.scalar_type());
  if (python_path(dev, direct, rp))
    return issued(fm, device("reduce")->call("reduce", ts, o));
  rp.dev = dev;
  int root = (int)o.rootRank;
  auto p = std::make_unique<Pending>();
  p->flight = fm;
  p->dev = dev;
  p->outputs = ts;
  int64_t count = t.numel();
  // the input stays as it is on every rank but the root: staged when it
  // is scaled first
  Span x;
  if (rp.premul) {
    x = scratch((int64_t)t.nbytes(), *p);
    copy_from_tensor(x.data, t);
    premultiply(rp, x.data, count);
  } else {
    x = in_span(t, *p);
  }
  std::vector<int64_t> sizes(size_, 0);
  sizes[root] = count;
  bool is_root = rank_ == root;
  auto put = [t, is_root](const char* res) {
    if (is_root)
      copy_to_tensor(t, res);
  };
  return reduce_core(*this, "reduce", c10d::OpType::REDUCE, rp, x, count,
                     &sizes, std::move(p), put, !!o.asyncOp, o.timeout);
}

// reduce_scatter of x (w pieces of `sizes` elements) into out.
static WorkPtr reduce_scatter_into(Backend& b, const char* name, c10d::OpType type,
                            const RedPlan& rp, Span x,
                            const std::vector<int64_t>& sizes,
                            std::unique_ptr<Pending> p,
                            std::vector<at::Tensor> outs,
                            const c10d::ReduceScatterOptions& o) {
  int64_t count = 0;
  for (auto s : sizes)
    count += s;
  premultiply(rp, x.data, count);
  p->outputs = outs;
  at::Tensor one = outs.size() == 1 ? outs[0] : at::Tensor();
  return reduce_core(b, name, type, rp, x, count, &sizes, std::move(p),
                     [outs](const char* res) { copy_pieces(res, outs); },
                     !!o.asyncOp, o.timeout, one);
}

WorkPtr Backend::reduce_scatter(std::vector<at::Tensor>& outs,
                                std::vector<std::vector<at::Tensor>>& ins,
                                const c10d::ReduceScatterOptions& o) {
  const char* name = "reduce_scatter";
  check_live(name);
  FlightMark fm = record(name, flat(ins), outs, o.timeout);
  auto all = all_of({&outs});
  for (const auto& l : ins)
    for (const auto& t : l)
      all.push_back(&t);
  bool direct;
  int dev = place(name, all, &direct);
  TORCH_CHECK_VALUE(outs.size() == 1, "spcoll: reduce_scatter takes one output");
  RedPlan rp = plan_reduce(name, o.reduceOp, outs[0].scalar_type());
  if (python_path(dev, direct, rp))
    return issued(fm, device(name)->call("reduce_scatter", outs, ins, o));
  if (ins.size() != 1 || (int)ins[0].size() != size_)
    refuse(name, "needs a list of " + std::to_string(size_) + " input tensors");
  rp.dev = dev;
  auto p = std::make_unique<Pending>();
  p->flight = fm;
  p->dev = dev;
  Span x = stage_all(*this, name, ins[0], *p);
  std::vector<int64_t> sizes;
  for (const auto& t : ins[0])
    sizes.push_back(t.numel());
  return reduce_scatter_into(*this, name, c10d::OpType::REDUCE_SCATTER, rp, x,
                             sizes, std::move(p), outs, o);
}

WorkPtr Backend::_reduce_scatter_base(at::Tensor& out, at::Tensor& in,
                                      const c10d::ReduceScatterOptions& o) {
  const char* name = "reduce_scatter_tensor";
  check_live(name);
  FlightMark fm = record(name, {in}, {out}, o.timeout);
  bool direct;
  int dev = place(name, {&out, &in}, &direct);
  RedPlan rp = plan_reduce(name, o.reduceOp, out.scalar_type());
  if (python_path(dev, direct, rp))
    return issued(fm, device(name)->call("_reduce_scatter_base", out, in, o));
  if (in.numel() != out.numel() * size_)
    refuse(name, "input has " + std::to_string(in.numel()) +
                     " elements, want " + std::to_string(size_) + " x " +
                     std::to_string(out.numel()));
  rp.dev = dev;
  auto p = pending(true);
  p->flight = fm;
  p->dev = dev;
  Span x;
  if (rp.premul) {
    x = scratch((int64_t)in.nbytes(), *p);
    copy_from_tensor(x.data, in);
  } else {
    x = in_span(in, *p);
  }
  std::vector<int64_t> sizes(size_, out.numel());
  return reduce_scatter_into(*this, name, c10d::OpType::_REDUCE_SCATTER_BASE,
                             rp, x, sizes, std::move(p), {out}, o);
}

WorkPtr Backend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outs, std::vector<at::Tensor>& ins,
    const c10d::ReduceScatterOptions& o) {
  const char* name = "reduce_scatter_tensor_coalesced";
  check_live(name);
  FlightMark fm = record(name, ins, outs, o.timeout);
  bool direct;
  int dev = place(name, all_of({&outs, &ins}), &direct);
  if (dev >= 0 && (outs.empty() ||
                   python_path(dev, direct,
                               plan_reduce(name, o.reduceOp,
                                           outs[0].scalar_type()))))
    return issued(fm, device(name)->call("reduce_scatter_tensor_coalesced", outs, ins, o));
  if (outs.size() != ins.size() || outs.empty())
    refuse(name, std::to_string(outs.size()) + " outputs for " +
                     std::to_string(ins.size()) + " inputs");
  for (size_t i = 0; i < ins.size(); i++)
    if (ins[i].numel() != outs[i].numel() * size_ ||
        ins[i].scalar_type() != ins[0].scalar_type())
      refuse(name, "input " + std::to_string(i) + " is not " +
                       std::to_string(size_) + " x its output, in " +
                       c10::toString(ins[0].scalar_type()));
  RedPlan rp = plan_reduce(name, o.reduceOp, outs[0].scalar_type());
  rp.dev = dev;
  // rank j's piece of every input, back to back: [j][i]
  auto p = std::make_unique<Pending>();
  p->flight = fm;
  p->dev = dev;
  int64_t per = bytes_of(outs);
  Span x = scratch(per * size_, *p);
  char* q = x.data;
  for (int j = 0; j < size_; j++)
    for (size_t i = 0; i < ins.size(); i++) {
      at::Tensor piece = ins[i].reshape({size_, -1}).select(0, j);
      copy_from_tensor(q, piece);
      q += piece.nbytes();
    }
  std::vector<int64_t> sizes(size_, per / (int64_t)at::elementSize(rp.move));
  return reduce_scatter_into(*this, name,
                             c10d::OpType::REDUCE_SCATTER_TENSOR_COALESCED, rp,
                             x, sizes, std::move(p), outs, o);
}

}  // namespace spcoll
