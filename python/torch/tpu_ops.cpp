// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The torch.distributed operations of ProcessGroupTPU.  Native: the
 * library's collectives (all-reduce, broadcast, all-gather, reduce-scatter,
 * even all-to-all, barrier).  Built here from the world's point-to-point
 * transfers: send/recv, gather, scatter, uneven all-to-all, monitored
 * barrier.  Reductions the library lacks (int8/int16/bool, the bitwise ops)
 * are an all-gather of the bytes and a local reduction with torch's ops.
 * Where the group's world takes the shared-memory path (every rank on this
 * host), the collectives the world's one-call functions cover
 * (tpu_world_all_reduce and the rest) go through them: microseconds for a
 * small all-reduce instead of a rendezvous round trip.
 */
#include "tpu_pg.hpp"

#include <cstring>

namespace tpu_torch {

namespace {

// Where an empty tensor (whose data pointer may be NULL) points the world's calls.
uint8_t emptyByte;

void* ptr(const at::Tensor& t) {
  void* p = t.data_ptr();
  return p ? p : &emptyByte;
}

void checkTensor(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.device().is_cpu(), "tpu: ", what,
              ": only CPU tensors are supported (this torch has no CUDA, so the "
              "library's CUDA channels are not used); got a tensor on ", t.device());
  TORCH_CHECK(t.layout() == c10::kStrided, "tpu: ", what, ": only dense (strided) tensors");
}

void checkOne(const std::vector<at::Tensor>& v, const char* what) {
  TORCH_CHECK(v.size() == 1, "tpu: ", what, ": expects one tensor per rank, got ", v.size());
  checkTensor(v[0], what);
}

// The library's type for @t, or 0 when it has none.
int libDtype(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return TPU_DT_FLOAT32;
    case at::kDouble: return TPU_DT_FLOAT64;
    case at::kHalf: return TPU_DT_FLOAT16;
    case at::kBFloat16: return TPU_DT_BFLOAT16;
    case at::kInt: return TPU_DT_INT32;
    case at::kLong: return TPU_DT_INT64;
    case at::kByte: return TPU_DT_UINT8;
    default: return 0;
  }
}

// The library's op for @op, or -1 when it has none.
int libOp(c10d::ReduceOp op) {
  switch (op) {
    case c10d::ReduceOp::SUM: return TPU_OP_SUM;
    case c10d::ReduceOp::AVG: return TPU_OP_SUM;  // and TPU_FINAL_DIV
    case c10d::ReduceOp::PRODUCT: return TPU_OP_PROD;
    case c10d::ReduceOp::MIN: return TPU_OP_MIN;
    case c10d::ReduceOp::MAX: return TPU_OP_MAX;
    default: return -1;
  }
}

void checkOp(c10d::ReduceOp op, const at::Tensor& t, const char* what) {
  bool integral = c10::isIntegralType(t.scalar_type(), /*includeBool=*/true);
  TORCH_CHECK(op != c10d::ReduceOp::PREMUL_SUM && op != c10d::ReduceOp::UNUSED, "tpu: ", what,
              ": unsupported reduce op");
  TORCH_CHECK(integral || (op != c10d::ReduceOp::BAND && op != c10d::ReduceOp::BOR &&
                           op != c10d::ReduceOp::BXOR),
              "tpu: ", what, ": bitwise reduce ops need an integer or bool tensor, got ",
              t.scalar_type());
  TORCH_CHECK(op != c10d::ReduceOp::AVG || !integral, "tpu: ", what,
              ": ReduceOp.AVG needs a floating-point tensor");
}

// Reduce the rows of @rows (size x n) with @op into a tensor of n elements.
at::Tensor localReduce(const at::Tensor& rows, c10d::ReduceOp op) {
  bool isBool = rows.scalar_type() == at::kBool;
  at::Tensor acc = rows[0].clone();
  for (int64_t r = 1; r < rows.size(0); r++) {
    const at::Tensor& x = rows[r];
    switch (op) {
      case c10d::ReduceOp::SUM: isBool ? acc.logical_or_(x) : acc.add_(x); break;
      case c10d::ReduceOp::PRODUCT: isBool ? acc.logical_and_(x) : acc.mul_(x); break;
      case c10d::ReduceOp::MIN: acc = at::minimum(acc, x); break;
      case c10d::ReduceOp::MAX: acc = at::maximum(acc, x); break;
      case c10d::ReduceOp::BAND: acc.bitwise_and_(x); break;
      case c10d::ReduceOp::BOR: acc.bitwise_or_(x); break;
      case c10d::ReduceOp::BXOR: acc.bitwise_xor_(x); break;
      default: TORCH_CHECK(false, "tpu: unsupported reduce op");
    }
  }
  return acc;
}

// Up to this many bytes (and ranks), an all-reduce is one exchange of every
// rank's input with every other and a local reduction in rank order (the
// same bits on every rank): one round trip instead of the library
// collective's two (its parameter check through rank 0, then the data).
// A size mismatch still fails (a receive of the wrong length).
constexpr int64_t kSmallBytes = 16 << 10;
constexpr int kSmallRanks = 16;

// The bytes of every rank's contiguous @t, as the rows of a (size x numel) tensor.
at::Tensor gatherRows(ProcessGroupTPU* pg, const at::Tensor& t, const char* what) {
  at::Tensor rows = at::empty({pg->getSize(), t.numel()}, t.options());
  if (pg->onShm())
    pg->checkWorld(what, tpu_world_all_gather(pg->world(), ptr(t), ptr(rows), (uint64_t)t.nbytes(),
                                              TPU_DT_UINT8, pg->timeoutNs()));
  else
    pg->runColl(what, TPU_COLL_GATHER, TPU_DT_UINT8, (uint64_t)t.nbytes(), TPU_OP_SUM,
                TPU_FINAL_NONE, false, t.data_ptr(), rows.data_ptr());
  return rows;
}

// All-reduce of contiguous @t (in place) on the worker thread.
void allreduceFlat(ProcessGroupTPU* pg, at::Tensor& t, c10d::ReduceOp op, const char* what) {
  int dt = libDtype(t);
  int lop = libOp(op);
  auto fin = op == c10d::ReduceOp::AVG ? TPU_FINAL_DIV : TPU_FINAL_NONE;
  if (pg->onShm()) {
    // The shared segment: the world's all-reduce at any size; what the
    // library cannot reduce, an all-gather of the bytes reduced here.
    if (dt && lop >= 0) {
      pg->checkWorld(what, tpu_world_all_reduce(pg->world(), ptr(t), ptr(t), (uint64_t)t.numel(),
                                                (enum tpu_dtype)dt, (enum tpu_reduce_op)lop,
                                                fin, pg->timeoutNs()));
      return;
    }
    t.view({-1}).copy_(localReduce(gatherRows(pg, t, what), op));
    return;
  }
  if ((int64_t)t.nbytes() <= kSmallBytes && pg->getSize() <= kSmallRanks) {
    int n = pg->getSize(), me = pg->getRank();
    at::Tensor rows = at::empty({n, t.numel()}, t.options());
    rows[me].copy_(t.view({-1}));
    std::vector<ProcessGroupTPU::Xfer> sends, recvs;
    for (int r = 0; r < n; r++) {
      if (r == me)
        continue;
      sends.push_back({r, t.data_ptr(), (size_t)t.nbytes()});
      recvs.push_back({r, rows[r].data_ptr(), (size_t)t.nbytes()});
    }
    pg->exchange(what, "torch_small", pg->nextStep(), sends, recvs);
    bool avg = op == c10d::ReduceOp::AVG;
    at::Tensor res = localReduce(rows, avg ? c10d::ReduceOp(c10d::ReduceOp::SUM) : op);
    if (avg)
      res.div_(n);
    t.view({-1}).copy_(res);
    return;
  }
  if (dt && lop >= 0) {
    pg->runColl(what, TPU_COLL_REDUCTION, (enum tpu_dtype)dt, (uint64_t)t.numel(),
                (enum tpu_reduce_op)lop, fin, false, t.data_ptr(), t.data_ptr());
    return;
  }
  // Not in the library: gather every rank's bytes, reduce here.
  t.view({-1}).copy_(localReduce(gatherRows(pg, t, what), op));
}

// A contiguous tensor to hand to the library, and whether it is a copy.
at::Tensor flat(const at::Tensor& t) { return t.is_contiguous() ? t : t.contiguous(); }

void copyBack(at::Tensor& dst, const at::Tensor& src) {
  if (!dst.is_same(src))
    dst.copy_(src);
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupTPU::allreduce(std::vector<at::Tensor>& tensors,
                                                          const c10d::AllreduceOptions& opts) {
  checkOne(tensors, "allreduce");
  checkOp(opts.reduceOp, tensors[0], "allreduce");
  at::Tensor t = tensors[0];
  auto op = opts.reduceOp;
  return enqueue(c10d::OpType::ALLREDUCE, tensors, [this, t, op]() mutable {
    at::Tensor f = flat(t);
    allreduceFlat(this, f, op, "allreduce");
    copyBack(t, f);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTPU::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK(!tensors.empty(), "tpu: allreduce_coalesced: no tensors");
  for (auto& t : tensors) {
    checkTensor(t, "allreduce_coalesced");
    TORCH_CHECK(t.scalar_type() == tensors[0].scalar_type(),
                "tpu: allreduce_coalesced: tensors must all have the same dtype");
  }
  checkOp(opts.reduceOp, tensors[0], "allreduce_coalesced");
  auto ts = tensors;
  auto op = opts.reduceOp;
  return enqueue(c10d::OpType::ALLREDUCE_COALESCED, tensors, [this, ts, op]() mutable {
    std::vector<at::Tensor> views;
    for (auto& t : ts)
      views.push_back(t.reshape({-1}));
    at::Tensor all = at::cat(views);
    allreduceFlat(this, all, op, "allreduce_coalesced");
    int64_t off = 0;
    for (auto& t : ts) {
      t.copy_(all.narrow(0, off, t.numel()).view(t.sizes()));
      off += t.numel();
    }
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTPU::broadcast(std::vector<at::Tensor>& tensors,
                                                          const c10d::BroadcastOptions& opts) {
  checkOne(tensors, "broadcast");
  TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < getSize(), "tpu: broadcast: bad root");
  at::Tensor t = tensors[0];
  int root = (int)opts.rootRank;
  return enqueue(c10d::OpType::BROADCAST, tensors, [this, t, root]() mutable {
    at::Tensor f = flat(t);
    bool src = root == getRank();
    if (onShm()) {
      checkWorld("broadcast", tpu_world_broadcast(world(), ptr(f), (uint64_t)f.nbytes(),
                                                  TPU_DT_UINT8, root, timeoutNs()));
      copyBack(t, f);
      return;
    }
    runColl("broadcast", TPU_COLL_BROADCAST, TPU_DT_UINT8, (uint64_t)f.nbytes(), TPU_OP_SUM,
            TPU_FINAL_NONE, src, src ? f.data_ptr() : nullptr, src ? nullptr : f.data_ptr());
    copyBack(t, f);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTPU::reduce(std::vector<at::Tensor>& tensors,
                                                       const c10d::ReduceOptions& opts) {
  checkOne(tensors, "reduce");
  checkOp(opts.reduceOp, tensors[0], "reduce");
  TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < getSize(), "tpu: reduce: bad root");
  at::Tensor t = tensors[0];
  auto op = opts.reduceOp;
  int root = (int)opts.rootRank;
  return enqueue(c10d::OpType::REDUCE, tensors, [this, t, op, root]() mutable {
    // An all-reduce whose result only the root keeps: the others' input stays.
    at::Tensor f = root == getRank() ? flat(t) : t.contiguous().clone();
    allreduceFlat(this, f, op, "reduce");
    if (root == getRank())
      copyBack(t, f);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTPU::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions&) {
  checkTensor(output, "_allgather_base");
  checkTensor(input, "_allgather_base");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "tpu: _allgather_base: dtypes differ");
  TORCH_CHECK(output.numel() == input.numel() * getSize(),
              "tpu: _allgather_base: output must hold size times the input's elements");
  at::Tensor out = output, in = input;
  return enqueue(c10d::OpType::_ALLGATHER_BASE, {output}, [this, out, in]() mutable {
    at::Tensor fo = flat(out), fi = flat(in);
    if (onShm())
      checkWorld("all_gather_into_tensor",
                 tpu_world_all_gather(world(), ptr(fi), ptr(fo), (uint64_t)fi.nbytes(),
                                      TPU_DT_UINT8, timeoutNs()));
    else
      runColl("all_gather_into_tensor", TPU_COLL_GATHER, TPU_DT_UINT8, (uint64_t)fi.nbytes(),
              TPU_OP_SUM, TPU_FINAL_NONE, false, fi.data_ptr(), fo.data_ptr());
    copyBack(out, fo);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTPU::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  checkOne(inputs, "allgather");
  TORCH_CHECK(outputs.size() == 1 && (int)outputs[0].size() == getSize(),
              "tpu: allgather: expects one output list of ", getSize(), " tensors");
  for (auto& o : outputs[0]) {
    checkTensor(o, "allgather");
    TORCH_CHECK(o.numel() == inputs[0].numel() && o.scalar_type() == inputs[0].scalar_type(),
                "tpu: allgather: every output must match the input's size and dtype");
  }
  at::Tensor in = inputs[0];
  auto outs = outputs[0];
  return enqueue(c10d::OpType::ALLGATHER, outs, [this, in, outs]() mutable {
    at::Tensor all = gatherRows(this, flat(in), "all_gather");
    for (int r = 0; r < getSize(); r++)
      outs[r].copy_(all[r].view(outs[r].sizes()));
  });
}

// Every rank's inputs, each in its own dtype and shape: their bytes side by
// side in one buffer, one all-gather, then split (output[r][i] = rank r's input i).
c10::intrusive_ptr<c10d::Work> ProcessGroupTPU::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputLists, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  TORCH_CHECK(!inputs.empty(), "tpu: allgather_coalesced: no input tensors");
  TORCH_CHECK((int)outputLists.size() == getSize(), "tpu: allgather_coalesced: expects ",
              getSize(), " output lists");
  for (auto& t : inputs)
    checkTensor(t, "allgather_coalesced");
  for (auto& list : outputLists) {
    TORCH_CHECK(list.size() == inputs.size(),
                "tpu: allgather_coalesced: every output list must hold one tensor per input");
    for (size_t i = 0; i < list.size(); i++) {
      checkTensor(list[i], "allgather_coalesced");
      TORCH_CHECK(list[i].numel() == inputs[i].numel() &&
                      list[i].scalar_type() == inputs[i].scalar_type(),
                  "tpu: allgather_coalesced: output ", i, " must match input ", i,
                  "'s size and dtype");
    }
  }
  std::vector<at::Tensor> outs;
  for (auto& list : outputLists)
    outs.insert(outs.end(), list.begin(), list.end());
  auto ins = inputs;
  auto lists = outputLists;
  return enqueue(c10d::OpType::ALLGATHER_COALESCED, outs, [this, ins, lists]() mutable {
    size_t total = 0;
    for (auto& t : ins)
      total += t.nbytes();
    at::Tensor mine = at::empty({(int64_t)total}, at::kByte);
    size_t off = 0;
    for (auto& t : ins) {
      at::Tensor f = flat(t);
      if (f.nbytes())
        std::memcpy((char*)mine.data_ptr() + off, f.data_ptr(), f.nbytes());
      off += f.nbytes();
    }
    at::Tensor all = gatherRows(this, mine, "allgather_coalesced");
    for (int r = 0; r < getSize(); r++) {
      off = 0;
      for (auto& o : lists[r]) {
        at::Tensor f = flat(o);
        if (f.nbytes())
          std::memcpy(f.data_ptr(), (char*)all[r].data_ptr() + off, f.nbytes());
        off += f.nbytes();
        copyBack(o, f);
      }
    }
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTPU::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  checkTensor(output, "reduce_scatter_tensor");
  checkTensor(input, "reduce_scatter_tensor");
  checkOp(opts.reduceOp, input, "reduce_scatter_tensor");
  TORCH_CHECK(input.numel() == output.numel() * getSize() &&
                  input.scalar_type() == output.scalar_type(),
              "tpu: reduce_scatter_tensor: input must hold size times the output's elements");
  at::Tensor out = output, in = input;
  auto op = opts.reduceOp;
  return enqueue(c10d::OpType::_REDUCE_SCATTER_BASE, {output}, [this, out, in, op]() mutable {
    at::Tensor fi = flat(in), fo = flat(out);
    int dt = libDtype(fi), lop = libOp(op);
    auto fin = op == c10d::ReduceOp::AVG ? TPU_FINAL_DIV : TPU_FINAL_NONE;
    if (dt && lop >= 0 && onShm()) {
      checkWorld("reduce_scatter",
                 tpu_world_reduce_scatter(world(), ptr(fi), ptr(fo), (uint64_t)fi.numel(),
                                          (enum tpu_dtype)dt, (enum tpu_reduce_op)lop, fin,
                                          timeoutNs()));
    } else if (dt && lop >= 0) {
      runColl("reduce_scatter", TPU_COLL_REDUCE_SCATTER, (enum tpu_dtype)dt,
              (uint64_t)fi.numel(), (enum tpu_reduce_op)lop, fin, false, fi.data_ptr(),
              fo.data_ptr());
    } else {
      at::Tensor all = fi.clone();
      allreduceFlat(this, all, op, "reduce_scatter");
      fo.view({-1}).copy_(all.view({-1}).narrow(0, fo.numel() * getRank(), fo.numel()));
    }
    copyBack(out, fo);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTPU::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  checkOne(outputs, "reduce_scatter");
  TORCH_CHECK(inputs.size() == 1 && (int)inputs[0].size() == getSize(),
              "tpu: reduce_scatter: expects one input list of ", getSize(), " tensors");
  for (auto& i : inputs[0])
    TORCH_CHECK(i.numel() == outputs[0].numel() && i.scalar_type() == outputs[0].scalar_type(),
                "tpu: reduce_scatter: every input must match the output's size and dtype");
  std::vector<at::Tensor> rows;
  for (auto& i : inputs[0])
    rows.push_back(i.reshape({-1}));
  at::Tensor in = at::cat(rows);
  return _reduce_scatter_base(outputs[0], in, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTPU::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  checkOne(inputs, "gather");
  int root = (int)opts.rootRank;
  TORCH_CHECK(root >= 0 && root < getSize(), "tpu: gather: bad root");
  std::vector<at::Tensor> outs;
  if (root == getRank()) {
    TORCH_CHECK(outputs.size() == 1 && (int)outputs[0].size() == getSize(),
                "tpu: gather: the root expects one output list of ", getSize(), " tensors");
    outs = outputs[0];
    for (auto& o : outs) {
      checkTensor(o, "gather");
      TORCH_CHECK(o.numel() == inputs[0].numel() && o.scalar_type() == inputs[0].scalar_type(),
                  "tpu: gather: every output must match the input's size and dtype");
    }
  } else {
    TORCH_CHECK(outputs.empty(), "tpu: gather: only the root passes output tensors");
  }
  at::Tensor in = inputs[0];
  return enqueue(c10d::OpType::GATHER, outs, [this, in, outs, root]() mutable {
    uint64_t step = nextStep();
    at::Tensor fi = flat(in);
    std::vector<Xfer> sends, recvs;
    std::vector<at::Tensor> staged(outs.size());
    if (root == getRank()) {
      for (int r = 0; r < getSize(); r++) {
        if (r == getRank()) {
          outs[r].copy_(fi.view(outs[r].sizes()));
          continue;
        }
        staged[r] = flat(outs[r]);
        recvs.push_back({r, staged[r].data_ptr(), (size_t)staged[r].nbytes()});
      }
    } else {
      sends.push_back({root, fi.data_ptr(), (size_t)fi.nbytes()});
    }
    exchange("gather", "torch_coll", step, sends, recvs);
    for (size_t r = 0; r < staged.size(); r++)
      if (staged[r].defined())
        copyBack(outs[r], staged[r]);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTPU::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  checkOne(outputs, "scatter");
  int root = (int)opts.rootRank;
  TORCH_CHECK(root >= 0 && root < getSize(), "tpu: scatter: bad root");
  std::vector<at::Tensor> ins;
  if (root == getRank()) {
    TORCH_CHECK(inputs.size() == 1 && (int)inputs[0].size() == getSize(),
                "tpu: scatter: the root expects one input list of ", getSize(), " tensors");
    ins = inputs[0];
    for (auto& i : ins) {
      checkTensor(i, "scatter");
      TORCH_CHECK(i.numel() == outputs[0].numel() && i.scalar_type() == outputs[0].scalar_type(),
                  "tpu: scatter: every input must match the output's size and dtype");
    }
  } else {
    TORCH_CHECK(inputs.empty(), "tpu: scatter: only the root passes input tensors");
  }
  at::Tensor out = outputs[0];
  return enqueue(c10d::OpType::SCATTER, outputs, [this, out, ins, root]() mutable {
    uint64_t step = nextStep();
    at::Tensor fo = flat(out);
    std::vector<Xfer> sends, recvs;
    std::vector<at::Tensor> staged(ins.size());
    if (root == getRank()) {
      for (int r = 0; r < getSize(); r++) {
        staged[r] = flat(ins[r]);
        if (r == getRank())
          fo.view({-1}).copy_(staged[r].view({-1}));
        else
          sends.push_back({r, staged[r].data_ptr(), (size_t)staged[r].nbytes()});
      }
    } else {
      recvs.push_back({root, fo.data_ptr(), (size_t)fo.nbytes()});
    }
    exchange("scatter", "torch_coll", step, sends, recvs);
    copyBack(out, fo);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTPU::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& outputSplits,
    std::vector<int64_t>& inputSplits, const c10d::AllToAllOptions&) {
  checkTensor(output, "alltoall_base");
  checkTensor(input, "alltoall_base");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "tpu: alltoall_base: dtypes differ");
  int n = getSize();
  at::Tensor out = output, in = input;
  if (outputSplits.empty() && inputSplits.empty()) {
    TORCH_CHECK(in.numel() == out.numel() && in.size(0) % n == 0,
                "tpu: alltoall_base: input and output must split evenly among the ranks");
    return enqueue(c10d::OpType::ALLTOALL_BASE, {output}, [this, out, in, n]() mutable {
      at::Tensor fi = flat(in), fo = flat(out);
      runColl("all_to_all_single", TPU_COLL_ALL_TO_ALL, TPU_DT_UINT8,
              (uint64_t)fi.nbytes() / (uint64_t)n, TPU_OP_SUM, TPU_FINAL_NONE, false,
              fi.data_ptr(), fo.data_ptr());
      copyBack(out, fo);
    });
  }
  // Uneven splits (rows of dim 0): one transfer per pair.
  auto splits = [n](const at::Tensor& t, std::vector<int64_t> s) {
    if (s.empty())
      s.assign(n, t.size(0) / n);
    TORCH_CHECK((int)s.size() == n, "tpu: alltoall_base: need one split per rank");
    int64_t sum = 0;
    for (auto x : s)
      sum += x;
    TORCH_CHECK(sum == (t.dim() ? t.size(0) : 0), "tpu: alltoall_base: splits do not add up to dim 0");
    return s;
  };
  auto os = splits(out, outputSplits), is = splits(in, inputSplits);
  return enqueue(c10d::OpType::ALLTOALL_BASE, {output}, [this, out, in, os, is, n]() mutable {
    uint64_t step = nextStep();
    at::Tensor fi = flat(in), fo = flat(out);
    int64_t rowIn = fi.dim() ? fi.numel() / std::max<int64_t>(fi.size(0), 1) : 0;
    int64_t rowOut = fo.dim() ? fo.numel() / std::max<int64_t>(fo.size(0), 1) : 0;
    size_t esz = fi.element_size();
    std::vector<Xfer> sends, recvs;
    int64_t io = 0, oo = 0;
    for (int r = 0; r < n; r++) {
      auto* ip = (char*)fi.data_ptr() + io * rowIn * esz;
      auto* op = (char*)fo.data_ptr() + oo * rowOut * esz;
      size_t ilen = is[r] * rowIn * esz, olen = os[r] * rowOut * esz;
      if (r == getRank()) {
        TORCH_CHECK(ilen == olen, "tpu: alltoall_base: this rank's own split differs");
        memcpy(op, ip, ilen);
      } else {
        sends.push_back({r, ip, ilen});
        recvs.push_back({r, op, olen});
      }
      io += is[r];
      oo += os[r];
    }
    exchange("all_to_all_single", "torch_coll", step, sends, recvs);
    copyBack(out, fo);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTPU::alltoall(std::vector<at::Tensor>& outputs,
                                                         std::vector<at::Tensor>& inputs,
                                                         const c10d::AllToAllOptions&) {
  int n = getSize();
  TORCH_CHECK((int)outputs.size() == n && (int)inputs.size() == n,
              "tpu: alltoall: expects ", n, " input and ", n, " output tensors");
  for (int r = 0; r < n; r++) {
    checkTensor(inputs[r], "alltoall");
    checkTensor(outputs[r], "alltoall");
  }
  auto ins = inputs, outs = outputs;
  return enqueue(c10d::OpType::ALLTOALL, outputs, [this, ins, outs, n]() mutable {
    uint64_t step = nextStep();
    std::vector<at::Tensor> fi(n), fo(n);
    std::vector<Xfer> sends, recvs;
    for (int r = 0; r < n; r++) {
      fi[r] = flat(ins[r]);
      fo[r] = flat(outs[r]);
      if (r == getRank()) {
        TORCH_CHECK(fi[r].nbytes() == fo[r].nbytes(), "tpu: alltoall: own block sizes differ");
        fo[r].view({-1}).copy_(fi[r].view({-1}));
      } else {
        sends.push_back({r, fi[r].data_ptr(), (size_t)fi[r].nbytes()});
        recvs.push_back({r, fo[r].data_ptr(), (size_t)fo[r].nbytes()});
      }
    }
    exchange("all_to_all", "torch_coll", step, sends, recvs);
    for (int r = 0; r < n; r++)
      copyBack(outs[r], fo[r]);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTPU::barrier(const c10d::BarrierOptions&) {
  // In order with the other collectives: the world's barrier on the shared
  // segment, else a one-byte all-reduce (the small all-reduce path: one
  // exchange).
  return enqueue(c10d::OpType::BARRIER, {}, [this]() {
    if (onShm()) {
      checkWorld("barrier", tpu_world_barrier_timeout(world(), timeoutNs()));
      return;
    }
    at::Tensor b = at::ones({1}, at::kByte);
    allreduceFlat(this, b, c10d::ReduceOp::MAX, "barrier");
  });
}

void ProcessGroupTPU::monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) {
  // As Gloo's: rank 0 hears from every other rank, then answers each; a
  // rank that does not check in within the timeout is named.
  auto limit = opts.timeout.count() > 0 ? opts.timeout : timeout();
  uint64_t step;
  {
    std::lock_guard<std::mutex> g(p2pLock_);
    step = ++monitored_;
  }
  uint8_t byte = 1;
  auto waitOne = [&](const std::string& k, bool isSend) -> tpu_status {
    std::mutex m;
    std::condition_variable cv;
    bool done = false;
    tpu_status result = 0;
    auto fin = [&](tpu_status st) {
      std::lock_guard<std::mutex> g(m);
      result = st;
      done = true;
      cv.notify_all();
    };
    uint8_t sink = 0;
    tpu_status st = isSend ? postSend(k, &byte, 1, fin)
                           : postRecv(k, &sink, 1, limit, [&](tpu_status s, size_t) { fin(s); });
    if (st)
      return st;
    std::unique_lock<std::mutex> g(m);
    if (!cv.wait_for(g, limit + std::chrono::milliseconds(1000), [&] { return done; })) {
      g.unlock();
      tpu_rendezvous_cancel(rdv(), k.data(), k.size());
      g.lock();
      cv.wait(g, [&] { return done; });
      if (!result)
        result = -ETIMEDOUT;
    }
    return result;
  };
  if (getRank() != 0) {
    tpu_status st = waitOne(key(getRank(), 0, "torch_mbarrier", step, 0), true);
    if (!st)
      st = waitOne(key(0, getRank(), "torch_mbarrier", step, 1), false);
    if (st)
      fail("monitored_barrier: rank 0 did not answer", st);
    return;
  }
  std::vector<int> missing;
  for (int r = 1; r < getSize(); r++) {
    if (waitOne(key(r, 0, "torch_mbarrier", step, 0), false)) {
      missing.push_back(r);
      if (!waitAllRanks)
        break;
    }
  }
  if (!missing.empty()) {
    std::string ranks;
    for (int r : missing)
      ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    throw std::runtime_error("tpu: monitored_barrier: rank" +
                             std::string(missing.size() > 1 ? "s " : " ") + ranks +
                             " failed to pass monitoredBarrier in " +
                             std::to_string(limit.count()) + " ms");
  }
  for (int r = 1; r < getSize(); r++)
    if (tpu_status st = waitOne(key(0, r, "torch_mbarrier", step, 1), true))
      fail("monitored_barrier: answering", st, "rank " + std::to_string(r));
}

// ---- send and receive: asynchronous rendezvous operations ----

c10::intrusive_ptr<c10d::Work> ProcessGroupTPU::send(std::vector<at::Tensor>& tensors, int dst,
                                                     int tag) {
  checkOne(tensors, "send");
  TORCH_CHECK(dst >= 0 && dst < getSize() && dst != getRank(), "tpu: send: bad destination rank ", dst);
  at::Tensor f = flat(tensors[0]);
  uint64_t seq;
  {
    std::lock_guard<std::mutex> g(p2pLock_);
    seq = sendSeq_[{dst, tag}]++;
  }
  std::string k = key(getRank(), dst, "torch_p2p", (uint64_t)(uint32_t)tag, seq);
  auto work = c10::make_intrusive<WorkTPU>(getRank(), c10d::OpType::SEND, tensors, timeout());
  auto* rdvp = rdv();
  work->cancel = [rdvp, k]() { tpu_rendezvous_cancel(rdvp, k.data(), k.size()); };
  // The callback holds the work (and so the source tensor) until the consumer took it.
  tpu_status st = postSend(k, f.data_ptr(), f.nbytes(), [work, f, dst](tpu_status s) {
    work->complete(s ? std::make_exception_ptr(std::runtime_error(
                           std::string("tpu: send to rank ") + std::to_string(dst) + ": " +
                           tpu_strerror(s)))
                     : nullptr);
  });
  if (st)
    fail("send", st);
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTPU::recv(std::vector<at::Tensor>& tensors, int src,
                                                     int tag) {
  checkOne(tensors, "recv");
  TORCH_CHECK(src >= 0 && src < getSize() && src != getRank(), "tpu: recv: bad source rank ", src);
  at::Tensor t = tensors[0];
  at::Tensor f = flat(t);
  uint64_t seq;
  auto work = c10::make_intrusive<WorkTPU>(getRank(), c10d::OpType::RECV, tensors, timeout());
  {
    std::lock_guard<std::mutex> g(p2pLock_);
    TORCH_CHECK(anyPending_[tag] == 0, "tpu: recv from rank ", src, ": a recv from any source "
                "of tag ", tag, " is pending; wait for it first");
    auto it = stash_.find({src, tag});
    if (it != stash_.end() && !it->second.empty()) {
      at::Tensor m = it->second.front();
      it->second.pop_front();
      TORCH_CHECK((size_t)m.nbytes() == (size_t)t.nbytes(), "tpu: recv from rank ", src,
                  ": it sent ", m.nbytes(), " bytes, ", t.nbytes(), " expected");
      t.copy_(m.view(t.scalar_type()).reshape(t.sizes()));
      work->setSourceRank(src);
      work->complete(nullptr);
      return work;
    }
    seq = recvSeq_[{src, tag}]++;
  }
  std::string k = key(src, getRank(), "torch_p2p", (uint64_t)(uint32_t)tag, seq);
  auto* rdvp = rdv();
  work->cancel = [rdvp, k]() { tpu_rendezvous_cancel(rdvp, k.data(), k.size()); };
  work->setSourceRank(src);
  size_t want = f.nbytes();
  work->finishing = [t, f]() mutable { copyBack(t, f); };
  tpu_status st = postRecv(k, f.data_ptr(), want, timeout(),
                           [work, f, src, want](tpu_status s, size_t got) {
                             if (!s && got != want)
                               s = -EMSGSIZE;
                             work->complete(
                                 s ? std::make_exception_ptr(std::runtime_error(
                                         std::string("tpu: recv from rank ") +
                                         std::to_string(src) + ": " + tpu_strerror(s) +
                                         (s == -EMSGSIZE ? " (the sizes differ)" : "")))
                                   : nullptr);
                           });
  if (st)
    fail("recv", st);
  return work;
}

// Any source: a receive posted for each peer's next message of the tag; the
// first to arrive wins, the others are cancelled, and one that arrived anyway
// is kept (stash_) for the next receive from that peer, so nothing is lost
// and the per-peer order holds.  Several of one tag match in posting order:
// each starts when the one before it is done (anyQueue_).
c10::intrusive_ptr<c10d::Work> ProcessGroupTPU::recvAnysource(std::vector<at::Tensor>& tensors,
                                                              int tag) {
  checkOne(tensors, "recv");
  TORCH_CHECK(getSize() > 1, "tpu: recv from any source in a group of one");
  at::Tensor t = tensors[0];
  auto work =
      c10::make_intrusive<WorkTPU>(getRank(), c10d::OpType::RECVANYSOURCE, tensors, timeout());
  {
    std::lock_guard<std::mutex> g(p2pLock_);
    if (anyPending_[tag]++ > 0) {
      anyQueue_[tag].push_back({work, t});
      return work;
    }
  }
  startAnysource(work, t, tag);
  return work;
}

void ProcessGroupTPU::anysourceDone(int tag, const std::function<void()>& complete) {
  c10::intrusive_ptr<WorkTPU> work;
  at::Tensor t;
  bool next = false;
  {
    std::lock_guard<std::mutex> g(p2pLock_);
    anyPending_[tag]--;
    auto it = anyQueue_.find(tag);
    if (!closing_ && it != anyQueue_.end() && !it->second.empty()) {
      work = it->second.front().work;
      t = it->second.front().t;
      it->second.pop_front();
      next = true;
    }
  }
  complete();
  if (next)
    startAnysource(work, t, tag);
}

void ProcessGroupTPU::startAnysource(const c10::intrusive_ptr<WorkTPU>& work, at::Tensor t,
                                     int tag) {
  size_t want = t.nbytes();
  struct State {
    std::mutex m;
    int winner = -1;
    int left = 0;
    tpu_status err = 0;
    std::vector<at::Tensor> tmp;
    std::vector<std::string> keys;
  };
  auto s = std::make_shared<State>();
  {
    std::unique_lock<std::mutex> g(p2pLock_);
    // A message kept from an earlier race is the next one of its peer.
    for (int p = 0; p < getSize(); p++) {
      auto it = stash_.find({p, tag});
      if (p == getRank() || it == stash_.end() || it->second.empty())
        continue;
      at::Tensor m = it->second.front();
      it->second.pop_front();
      g.unlock();
      anysourceDone(tag, [&]() {
        if ((size_t)m.nbytes() != want) {
          work->complete(std::make_exception_ptr(std::runtime_error(
              "tpu: recv from any source: rank " + std::to_string(p) + " sent " +
              std::to_string(m.nbytes()) + " bytes, " + std::to_string(want) + " expected")));
        } else {
          t.copy_(m.view(t.scalar_type()).reshape(t.sizes()));
          work->setSourceRank(p);
          work->complete(nullptr);
        }
      });
      return;
    }
    s->tmp.resize(getSize());
    s->keys.resize(getSize());
    for (int p = 0; p < getSize(); p++) {
      if (p == getRank())
        continue;
      s->tmp[p] = at::empty({(int64_t)want}, at::kByte);
      s->keys[p] = key(p, getRank(), "torch_p2p", (uint64_t)(uint32_t)tag, recvSeq_[{p, tag}]);
      s->left++;
    }
  }
  auto* rdvp = rdv();
  work->cancel = [rdvp, s]() {
    for (auto& k : s->keys)
      if (!k.empty())
        tpu_rendezvous_cancel(rdvp, k.data(), k.size());
  };
  // The context's destroy (in ~ProcessGroupTPU) runs pending callbacks first.
  ProcessGroupTPU* self = this;
  for (int p = 0; p < getSize(); p++) {
    if (p == getRank())
      continue;
    auto done = [s, p, tag, want, t, work, self, rdvp](tpu_status st, size_t got) mutable {
      bool cancelOthers = false, last;
      {
        std::lock_guard<std::mutex> g(self->p2pLock_);
        if (!st && got != want)
          st = -EMSGSIZE;
        if (!st) {
          self->recvSeq_[{p, tag}]++;
          if (s->winner < 0) {
            s->winner = p;
            cancelOthers = true;
          } else {
            self->stash_[{p, tag}].push_back(s->tmp[p]);
          }
        } else if (st != -ECANCELED && !s->err) {
          s->err = st;
        }
        last = --s->left == 0;
      }
      if (cancelOthers)
        for (size_t q = 0; q < s->keys.size(); q++)
          if ((int)q != p && !s->keys[q].empty())
            tpu_rendezvous_cancel(rdvp, s->keys[q].data(), s->keys[q].size());
      if (!last)
        return;
      self->anysourceDone(tag, [&]() {
        if (s->winner >= 0) {
          t.copy_(s->tmp[s->winner].view(t.scalar_type()).reshape(t.sizes()));
          work->setSourceRank(s->winner);
          work->complete(nullptr);
        } else {
          work->complete(std::make_exception_ptr(std::runtime_error(
              std::string("tpu: recv from any source: ") +
              tpu_strerror(s->err ? s->err : -ECANCELED))));
        }
      });
    };
    tpu_status st = postRecv(s->keys[p], s->tmp[p].data_ptr(), want, timeout(), done);
    if (st)
      done(st, 0);
  }
}

}  // namespace tpu_torch
