// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * ProcessGroupTPU: torch.distributed's "tpu" backend over libtpu_user.
 *
 * A thin adapter: each process group forms a tpu_world through the
 * c10d::Store torch hands it (tpu_world_create_with_store), runs the
 * collectives the library has on its tpu_coll (one executor per call, in
 * call order, on one worker thread per group) and builds the rest from
 * the world rendezvous's own point-to-point transfers.  Where the world's
 * one-call collectives take the shared-memory path (every rank on this
 * host), the collectives they cover go through them instead.  Send and receive
 * are asynchronous rendezvous operations whose callbacks complete the Work.
 */
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

extern "C" {
#include "tpu_user.h"
}

namespace tpu_torch {

// A Work whose future the backend completes, from its worker thread or from
// a rendezvous callback.
class WorkTPU : public c10d::Work {
 public:
  WorkTPU(int rank, c10d::OpType type, std::vector<at::Tensor> outputs,
          std::chrono::milliseconds bound);
  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  int sourceRank() const override;
  std::vector<at::Tensor> result() override;
  void synchronize() override {}
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  void abort() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

  // Exactly once: nullptr for success.
  void complete(std::exception_ptr err);
  void setSourceRank(int r) { source_ = r; }
  // Withdraws what is still pending (a send nobody took) when wait() times out.
  std::function<void()> cancel;
  // Runs before completion on success (copy a staged result back).
  std::function<void()> finishing;

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::chrono::milliseconds bound_;
  int source_ = -1;
};

class ProcessGroupTPU : public c10d::ProcessGroup {
 public:
  ProcessGroupTPU(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                  std::chrono::milliseconds timeout);
  ~ProcessGroupTPU() override;

  const std::string getBackendName() const override { return "tpu"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputLists, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputSplits,
                                               std::vector<int64_t>& inputSplits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                               int tag) override;

  // Library pieces the ops use (tpu_pg.cpp).
  // One library collective over the group, on the caller's thread; throws.
  void runColl(const char* what, enum tpu_coll_type type, enum tpu_dtype dtype, uint64_t count,
               enum tpu_reduce_op op, enum tpu_final_op fin, bool source, const void* in,
               void* out);
  // A point-to-point key of this group: @edge, @frame (a tag or a step), @iter.
  std::string key(int src, int dst, const char* edge, uint64_t frame, uint64_t iter) const;
  // Post a send / receive; @done runs on the context thread with the status
  // (only when 0 is returned).
  tpu_status postSend(const std::string& k, const void* data, size_t len,
                std::function<void(tpu_status)> done);
  tpu_status postRecv(const std::string& k, void* data, size_t cap, std::chrono::milliseconds timeout,
                std::function<void(tpu_status, size_t)> done);
  // Blocking exchange for collectives built from transfers: every send and
  // receive of @sends / @recvs, waited for; throws with the first failure.
  struct Xfer {
    int peer;
    void* data;
    size_t len;
  };
  void exchange(const char* what, const char* edge, uint64_t step, const std::vector<Xfer>& sends,
                const std::vector<Xfer>& recvs);
  // Queue @fn on the worker; it returns the Work it completes.
  c10::intrusive_ptr<WorkTPU> enqueue(c10d::OpType type, std::vector<at::Tensor> outputs,
                                      std::function<void()> fn);
  uint64_t nextStep() { return ++step_; }
  [[noreturn]] void fail(const char* what, tpu_status st, const std::string& more = "") const;
  // Whether the world's one-call collectives (tpu_world_*) take the shared
  // segment, one per host with two levels across hosts ("hier") included:
  // then the ops use them; otherwise the paths above.
  bool onShm() const { return shm_; }
  // The world's path: "shm", "hier" or "rdv" (tpu_world_coll_path()).
  const std::string& collPath() const { return path_; }
  struct tpu_world* world() const { return world_; }
  uint64_t timeoutNs() const;
  // Throws for a failed tpu_world_* call, with the world's reason.
  void checkWorld(const char* what, tpu_status st) const;
  std::chrono::milliseconds timeout() const { return timeout_; }
  struct tpu_rendezvous* rdv() const { return rdv_; }

 private:
  void workerLoop();
  static tpu_status storeSet(void* arg, const char* key, const void* val, size_t len);
  static tpu_status storeGet(void* arg, const char* key, void* buf, size_t size, size_t* len,
                             uint32_t timeout_ms);
  static tpu_status storeAdd(void* arg, const char* key, int64_t delta, int64_t* total);

  c10::intrusive_ptr<c10d::Store> store_;
  std::chrono::milliseconds timeout_;
  struct tpu_context* ctx_ = nullptr;
  struct tpu_world* world_ = nullptr;
  struct tpu_rendezvous* rdv_ = nullptr;
  struct tpu_coll* coll_ = nullptr;
  std::vector<std::string> devices_;
  std::vector<const char*> devicePtrs_;
  uint64_t step_ = 0;  // worker thread only (collective order)
  bool shm_ = false;   // set while forming, read-only after
  std::string path_;   // likewise

 public:
  uint64_t monitored_ = 0;  // under p2pLock_

 private:

  std::mutex qlock_;
  std::condition_variable qcond_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::thread worker_;

 public:
  // Send/receive sequence numbers per (peer, tag), under p2pLock_.
  std::mutex p2pLock_;
  std::map<std::pair<int, int>, uint64_t> sendSeq_, recvSeq_;
  // Messages an any-source receive took off the wire but did not deliver
  // (a second peer's arrived as the first won), per (peer, tag), in order.
  std::map<std::pair<int, int>, std::deque<at::Tensor>> stash_;
  // Any-source receives per tag, the one running and those queued behind it
  // (a named receive of the tag waits its turn).
  std::map<int, int> anyPending_;
  // Any-source receives of one tag match in the order they were posted: each
  // waits here until the one before it has its message.
  struct AnyWaiter {
    c10::intrusive_ptr<WorkTPU> work;
    at::Tensor t;
  };
  std::map<int, std::deque<AnyWaiter>> anyQueue_;
  bool closing_ = false;  // the destructor runs: no queued receive starts
  // Start an any-source receive (p2pLock_ not held).
  void startAnysource(const c10::intrusive_ptr<WorkTPU>& work, at::Tensor t, int tag);
  // The any-source receive of @tag ended: it stops counting as pending, then
  // @complete completes its work (so a named receive of the tag may follow
  // at once), then the next one queued starts.
  void anysourceDone(int tag, const std::function<void()>& complete);
};

c10::intrusive_ptr<c10d::ProcessGroup> create(const c10::intrusive_ptr<c10d::Store>& store,
                                              int rank, int size,
                                              std::chrono::milliseconds timeout);

}  // namespace tpu_torch
