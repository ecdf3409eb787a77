// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * ProcessGroupTPU's machinery: forming the world through torch's store,
 * the worker thread, the Work objects, and the library calls the ops use.
 */
#include "tpu_pg.hpp"

#include <Python.h>

#include <netdb.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <atomic>
#include <cstring>
#include <stdexcept>

namespace tpu_torch {

namespace {

// A group key of the backend's own, apart from the world's one-call collectives.
constexpr int32_t kGroupKey = 0x546f7263;  // "Torc"
constexpr size_t kSecretLen = 32;
// Where an empty tensor (whose data pointer may be NULL) points the library.
uint8_t emptyByte;

uint64_t ns(std::chrono::milliseconds ms) {
  return ms.count() > 0 ? (uint64_t)ms.count() * 1000000ull : 0;
}

// The local address a datagram to @host:@port would leave from (connect()
// on a UDP socket sends nothing): the interface this host reaches it on.
std::string addressTowards(const std::string& host, uint16_t port) {
  struct addrinfo hints = {}, *res = nullptr;
  std::string addr;

  hints.ai_socktype = SOCK_DGRAM;
  if (host.empty() || getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res))
    return addr;
  for (struct addrinfo* ai = res; ai && addr.empty(); ai = ai->ai_next) {
    int fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    char ip[INET6_ADDRSTRLEN];

    if (fd < 0)
      continue;
    if (!connect(fd, ai->ai_addr, ai->ai_addrlen) &&
        !getsockname(fd, (struct sockaddr*)&ss, &sl) &&
        !getnameinfo((struct sockaddr*)&ss, sl, ip, sizeof(ip), nullptr, 0, NI_NUMERICHOST))
      addr = ss.ss_family == AF_INET6 ? "[" + std::string(ip) + "]" : std::string(ip);
    close(fd);
  }
  freeaddrinfo(res);
  return addr;
}

// This host's address for tcp, where the other ranks can reach it: the one
// it reaches torch's TCPStore from (what the C world does with its own
// store), else MASTER_ADDR's, else what the host name resolves to, as Gloo
// finds it (Debian's 127.0.1.1 included: one host only), else loopback.
std::string hostAddress(const c10::intrusive_ptr<c10d::Store>& store) {
  c10d::Store* s = store.get();
  std::string addr;

  while (auto* prefix = dynamic_cast<c10d::PrefixStore*>(s))
    s = prefix->getUnderlyingStore().get();
  if (auto* tcp = dynamic_cast<c10d::TCPStore*>(s))
    addr = addressTowards(tcp->getHost(), tcp->getPort());
  if (addr.empty() && getenv("MASTER_ADDR"))
    addr = addressTowards(getenv("MASTER_ADDR"), 29500);
  if (!addr.empty())
    return addr;

  char name[256] = "";
  struct addrinfo hints = {}, *res = nullptr;
  addr = "127.0.0.1";
  if (gethostname(name, sizeof(name) - 1))
    return addr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(name, nullptr, &hints, &res) || !res)
    return addr;
  char ip[64];
  if (!getnameinfo(res->ai_addr, res->ai_addrlen, ip, sizeof(ip), nullptr, 0, NI_NUMERICHOST))
    addr = ip;
  freeaddrinfo(res);
  return addr;
}

}  // namespace

// ---- Work ----

WorkTPU::WorkTPU(int rank, c10d::OpType type, std::vector<at::Tensor> outputs,
                 std::chrono::milliseconds bound)
    : c10d::Work(rank, type),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get()))),
      bound_(bound) {}

bool WorkTPU::isCompleted() {
  std::lock_guard<std::mutex> g(mutex_);
  return completed_;
}

bool WorkTPU::isSuccess() const {
  std::lock_guard<std::mutex> g(mutex_);
  return completed_ && !exception_;
}

std::exception_ptr WorkTPU::exception() const {
  std::lock_guard<std::mutex> g(mutex_);
  return exception_;
}

int WorkTPU::sourceRank() const {
  TORCH_CHECK(source_ >= 0, "tpu: sourceRank() is only known for a completed recv from any source");
  return source_;
}

std::vector<at::Tensor> WorkTPU::result() { return outputs_; }

void WorkTPU::complete(std::exception_ptr err) {
  if (!err && finishing) {
    try {
      finishing();
    } catch (...) {
      err = std::current_exception();
    }
  }
  {
    std::lock_guard<std::mutex> g(mutex_);
    if (completed_)
      return;
    completed_ = true;
    exception_ = err;
  }
  cv_.notify_all();
  if (err)
    future_->setError(err);
  else
    future_->markCompleted(c10::IValue(outputs_));
}

bool WorkTPU::wait(std::chrono::milliseconds timeout) {
  // Every op is bounded by the group's timeout; a little slack for its
  // failure to arrive before this gives up on its own.
  auto limit = timeout == kNoTimeout ? bound_ + std::chrono::milliseconds(5000) : timeout;
  std::unique_lock<std::mutex> g(mutex_);
  if (!cv_.wait_for(g, limit, [this] { return completed_; })) {
    g.unlock();
    if (cancel)
      cancel();
    throw std::runtime_error("tpu: operation timed out after " +
                             std::to_string(limit.count()) + " ms");
  }
  if (exception_)
    std::rethrow_exception(exception_);
  return true;
}

void WorkTPU::abort() {
  if (cancel)
    cancel();
}

c10::intrusive_ptr<c10::ivalue::Future> WorkTPU::getFuture() { return future_; }

// ---- the store torch gave us, as the world's store ----

tpu_status ProcessGroupTPU::storeSet(void* arg, const char* key, const void* val, size_t len) {
  auto* pg = static_cast<ProcessGroupTPU*>(arg);
  try {
    auto* p = static_cast<const uint8_t*>(val);
    pg->store_->set(key, std::vector<uint8_t>(p, p + len));
    return 0;
  } catch (...) {
    return -ECONNRESET;
  }
}

tpu_status ProcessGroupTPU::storeGet(void* arg, const char* key, void* buf, size_t size,
                                     size_t* len, uint32_t timeout_ms) {
  auto* pg = static_cast<ProcessGroupTPU*>(arg);
  try {
    if (!pg->store_->check({key})) {
      if (!timeout_ms)
        return -ETIMEDOUT;
      try {
        pg->store_->wait({key}, std::chrono::milliseconds(timeout_ms));
      } catch (...) {
        return -ETIMEDOUT;
      }
    }
    auto v = pg->store_->get(key);
    *len = v.size();
    if (size)
      memcpy(buf, v.data(), std::min(size, v.size()));
    return v.size() > size ? -EMSGSIZE : 0;
  } catch (...) {
    return -ECONNRESET;
  }
}

tpu_status ProcessGroupTPU::storeAdd(void* arg, const char* key, int64_t delta, int64_t* total) {
  auto* pg = static_cast<ProcessGroupTPU*>(arg);
  try {
    *total = pg->store_->add(key, delta);
    return 0;
  } catch (...) {
    return -ECONNRESET;
  }
}

// ---- forming ----

ProcessGroupTPU::ProcessGroupTPU(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                 std::chrono::milliseconds timeout)
    : c10d::ProcessGroup(rank, size), store_(store), timeout_(timeout) {
  static std::atomic<unsigned> serial{0};
  tpu_status st = tpu_context_create(nullptr, &ctx_);
  if (st)
    fail("creating the context", st);

  // The job secret: rank 0 draws it, the store torch trusts carries it.
  std::vector<uint8_t> secret(kSecretLen);
  try {
    if (rank == 0) {
      if (getrandom(secret.data(), secret.size(), 0) != (ssize_t)secret.size())
        throw std::runtime_error("getrandom failed");
      store_->set("tpu/secret", secret);
    } else {
      store_->wait({"tpu/secret"}, timeout_);
      secret = store_->get("tpu/secret");
    }
  } catch (const std::exception& e) {
    tpu_context_destroy(ctx_);
    throw std::runtime_error(std::string("tpu: no job secret through the store: ") + e.what());
  }
  st = secret.empty() ? -EPROTO : tpu_context_set_secret(ctx_, secret.data(), secret.size());
  std::fill(secret.begin(), secret.end(), 0);
  if (st) {
    tpu_context_destroy(ctx_);
    fail("setting the job secret", st);
  }

  std::string tcp = "tcp://" + hostAddress(store) + ":0";
  std::string shm = "shm://tpu-torch-" + std::to_string(getpid()) + "-" +
                    std::to_string(serial.fetch_add(1));
  const char* urls[2] = {tcp.c_str(), shm.c_str()};
  struct tpu_world_info info = {};
  info.rank = rank;
  info.size = size;
  info.local_rank = -1;
  info.local_size = -1;
  struct tpu_world_options wo = {};
  wo.info = &info;
  wo.job = "torch";
  wo.listen_urls = urls;
  wo.nlisten = 2;
  wo.timeout_ms = (uint32_t)std::min<int64_t>(timeout_.count(), UINT32_MAX - 1);
  struct tpu_world_store cb = {};
  cb.arg = this;
  cb.set = storeSet;
  cb.get = storeGet;
  cb.add = storeAdd;
  st = tpu_world_create_with_store(ctx_, &wo, &cb, &world_);
  if (st == TPU_E_NO_TRANSPORT) {
    wo.nlisten = 1;  // shm ruled out here: tcp alone
    st = tpu_world_create_with_store(ctx_, &wo, &cb, &world_);
  }
  if (!st) {
    rdv_ = tpu_world_rendezvous(world_);
    st = tpu_coll_create(rdv_, &coll_);
  }
  std::string why;
  if (!st) {
    // The world's collectives decide their path (shared segment or
    // rendezvous, the same on every rank) at the first one: a barrier here,
    // so the ops know it and a TPU_COLL_PATH=shm that cannot be had fails
    // forming.
    st = tpu_world_barrier_timeout(world_, ns(timeout_));
    if (st) {
      char reason[256] = "";
      tpu_world_last_reason(world_, reason, sizeof(reason));
      why = reason;
    }
    // Two levels across hosts are the same calls: a segment per host, its
    // leader over the network.
    path_ = st ? "" : tpu_world_coll_path(world_);
    shm_ = path_ == "shm" || path_ == "hier";
  }
  if (st) {
    tpu_coll_destroy(coll_);
    tpu_world_destroy(world_);
    tpu_context_destroy(ctx_);
    fail("forming the group", st, why);
  }
  for (int r = 0; r < size; r++) {
    char name[256];
    tpu_world_device_name(world_, r, name, sizeof(name));
    devices_.emplace_back(name);
  }
  for (auto& d : devices_)
    devicePtrs_.push_back(d.c_str());
  worker_ = std::thread([this] { workerLoop(); });
}

namespace {
// Gives the GIL up for a scope where the calling thread holds it.
class GilReleased {
 public:
  GilReleased() : saved_(Py_IsInitialized() && PyGILState_Check() ? PyEval_SaveThread() : nullptr) {}
  ~GilReleased() {
    if (saved_)
      PyEval_RestoreThread(saved_);
  }
  GilReleased(const GilReleased&) = delete;
  GilReleased& operator=(const GilReleased&) = delete;

 private:
  PyThreadState* saved_;
};
}  // namespace

ProcessGroupTPU::~ProcessGroupTPU() {
  // Python drops a group's last reference with the GIL held.  The worker
  // and the context's thread may drop the last reference to a tensor that
  // has a Python object, which takes the GIL: joining them with it held
  // would wait for ever (seen: the worker destroying a finished Work).
  GilReleased nogil;
  {
    std::lock_guard<std::mutex> g(qlock_);
    stop_ = true;
  }
  qcond_.notify_all();
  if (worker_.joinable())
    worker_.join();
  std::vector<c10::intrusive_ptr<WorkTPU>> queued;
  {
    std::lock_guard<std::mutex> g(p2pLock_);
    closing_ = true;
    for (auto& q : anyQueue_)
      for (auto& a : q.second)
        queued.push_back(a.work);
    anyQueue_.clear();
  }
  for (auto& w : queued)
    w->complete(std::make_exception_ptr(
        std::runtime_error("tpu: recv from any source: the process group was destroyed")));
  // Pending transfers fail (their Works complete with the error) before the memory goes.
  tpu_coll_destroy(coll_);
  tpu_world_destroy(world_);
  tpu_context_destroy(ctx_);
}

void ProcessGroupTPU::fail(const char* what, tpu_status st, const std::string& more) const {
  std::string msg = std::string("tpu: ") + what + " (rank " + std::to_string(getRank()) +
                    " of " + std::to_string(getSize()) + "): " + tpu_strerror(st);
  if (!more.empty())
    msg += ": " + more;
  throw std::runtime_error(msg);
}

uint64_t ProcessGroupTPU::timeoutNs() const { return ns(timeout_); }

void ProcessGroupTPU::checkWorld(const char* what, tpu_status st) const {
  if (!st)
    return;
  char reason[256] = "";
  tpu_world_last_reason(world_, reason, sizeof(reason));
  fail(what, st, reason);
}

// ---- the worker: collectives in call order ----

c10::intrusive_ptr<WorkTPU> ProcessGroupTPU::enqueue(c10d::OpType type,
                                                     std::vector<at::Tensor> outputs,
                                                     std::function<void()> fn) {
  auto work = c10::make_intrusive<WorkTPU>(getRank(), type, std::move(outputs), timeout_);
  {
    std::lock_guard<std::mutex> g(qlock_);
    queue_.push_back([work, fn] {
      try {
        fn();
        work->complete(nullptr);
      } catch (...) {
        work->complete(std::current_exception());
      }
    });
  }
  qcond_.notify_one();
  return work;
}

void ProcessGroupTPU::workerLoop() {
  for (;;) {
    std::function<void()> fn;
    {
      std::unique_lock<std::mutex> g(qlock_);
      qcond_.wait(g, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty())
        return;
      fn = std::move(queue_.front());
      queue_.pop_front();
    }
    fn();
  }
}

void ProcessGroupTPU::runColl(const char* what, enum tpu_coll_type type, enum tpu_dtype dtype,
                              uint64_t count, enum tpu_reduce_op op, enum tpu_final_op fin,
                              bool source, const void* in, void* out) {
  uint64_t step = nextStep();
  if (!count) {
    // Still a collective (the ranks check they agree), on no data.
    bool bcast = type == TPU_COLL_BROADCAST;
    if (!in && !(bcast && !source))
      in = &emptyByte;
    if (!out && !(bcast && source))
      out = &emptyByte;
  }
  struct tpu_coll_group g = {};
  g.group_key = kGroupKey;
  g.group_size = getSize();
  g.device_type = "CPU";
  g.devices = devicePtrs_.data();
  struct tpu_coll_instance inst = {};
  inst.instance_key = (int32_t)(step & 0x7fffffff);
  inst.type = type;
  inst.dtype = dtype;
  inst.count = count;
  inst.op = op;
  inst.final_op = fin;
  inst.timeout_ns = ns(timeout_);
  struct tpu_coll_member m = {};
  m.device = devicePtrs_[getRank()];
  m.is_source = source;
  struct tpu_coll_exec* exec = nullptr;
  tpu_status st = tpu_coll_exec_create(coll_, (int64_t)step, &exec);
  if (!st)
    st = tpu_coll_exec_run(exec, &g, &inst, &m, in, out);
  tpu_coll_exec_destroy(exec);
  if (st) {
    char reason[512] = "";
    tpu_coll_last_reason(coll_, reason, sizeof(reason));
    fail(what, st, reason);
  }
}

// ---- point to point over the world's rendezvous ----

std::string ProcessGroupTPU::key(int src, int dst, const char* edge, uint64_t frame,
                                 uint64_t iter) const {
  struct tpu_key k = {};
  k.src_device = tpu_str(devices_[src].c_str());
  k.dst_device = tpu_str(devices_[dst].c_str());
  k.src_incarnation = 1;
  k.edge_name = tpu_str(edge);
  k.frame_id = frame;
  k.iter_id = iter;
  char buf[1024];
  size_t len = 0;
  tpu_status st = tpu_key_build(&k, buf, sizeof(buf), &len);
  if (st)
    fail("building a key", st);
  return std::string(buf, len);
}

namespace {
struct SendCtx {
  std::function<void(tpu_status)> done;
};
struct RecvCtx {
  std::function<void(tpu_status, size_t)> done;
};
void onSend(void* arg, tpu_status st) {
  auto* c = static_cast<SendCtx*>(arg);
  c->done(st);
  delete c;
}
void onRecv(void* arg, tpu_status st, size_t len) {
  auto* c = static_cast<RecvCtx*>(arg);
  c->done(st, len);
  delete c;
}
}  // namespace

tpu_status ProcessGroupTPU::postSend(const std::string& k, const void* data, size_t len,
                                     std::function<void(tpu_status)> done) {
  struct tpu_tensor t = {};
  t.data = data ? const_cast<void*>(data) : &emptyByte;
  t.len = len;
  auto* c = new SendCtx{std::move(done)};
  tpu_status st = tpu_rendezvous_send(rdv_, k.data(), k.size(), &t, 0, onSend, c);
  if (st)
    delete c;
  return st;
}

tpu_status ProcessGroupTPU::postRecv(const std::string& k, void* data, size_t cap,
                                     std::chrono::milliseconds timeout,
                                     std::function<void(tpu_status, size_t)> done) {
  struct tpu_tensor t = {};
  t.data = data ? data : &emptyByte;
  t.len = cap;
  auto* c = new RecvCtx{std::move(done)};
  tpu_status st = tpu_rendezvous_recv(rdv_, k.data(), k.size(), &t, ns(timeout), onRecv, c);
  if (st)
    delete c;
  return st;
}

void ProcessGroupTPU::exchange(const char* what, const char* edge, uint64_t step,
                               const std::vector<Xfer>& sends, const std::vector<Xfer>& recvs) {
  struct State {
    std::mutex m;
    std::condition_variable cv;
    size_t left;
    tpu_status first = 0;
    std::string why;
  };
  auto s = std::make_shared<State>();
  s->left = sends.size() + recvs.size();
  auto finish = [s](tpu_status st, const std::string& why) {
    std::lock_guard<std::mutex> g(s->m);
    if (st && !s->first) {
      s->first = st;
      s->why = why;
      s->cv.notify_all();
    }
    if (--s->left == 0)
      s->cv.notify_all();
  };
  std::vector<std::string> posted;
  size_t i = 0;
  tpu_status st = 0;
  for (; !st && i < recvs.size(); i++) {
    size_t want = recvs[i].len;
    int peer = recvs[i].peer;
    posted.push_back(key(peer, getRank(), edge, step, 0));
    st = postRecv(posted.back(), recvs[i].data, want, timeout_,
                  [finish, want, peer](tpu_status rst, size_t got) {
                    if (!rst && got != want)
                      finish(-EMSGSIZE, "rank " + std::to_string(peer) + " sent " +
                                            std::to_string(got) + " bytes, " +
                                            std::to_string(want) + " expected");
                    else
                      finish(rst, rst ? "with rank " + std::to_string(peer) : "");
                  });
  }
  for (size_t j = 0; !st && j < sends.size(); j++, i++) {
    int peer = sends[j].peer;
    posted.push_back(key(getRank(), peer, edge, step, 0));
    st = postSend(posted.back(), sends[j].data, sends[j].len, [finish, peer](tpu_status sst) {
      finish(sst, sst ? "with rank " + std::to_string(peer) : "");
    });
  }
  if (st) {
    // The one that failed and those never posted count as done, with the error.
    posted.pop_back();
    for (size_t n = i - 1; n < sends.size() + recvs.size(); n++)
      finish(st, "posting");
  }
  // The first failure ends the exchange: what is still pending is withdrawn
  // (a peer whose message did not fit never sees its send taken otherwise).
  std::unique_lock<std::mutex> g(s->m);
  if (st || !s->cv.wait_for(g, timeout_, [&] { return s->left == 0 || s->first; }) ||
      s->left) {
    g.unlock();
    for (auto& k : posted)
      tpu_rendezvous_cancel(rdv_, k.data(), k.size());
    g.lock();
    s->cv.wait(g, [&] { return s->left == 0; });
    if (!s->first)
      s->first = -ETIMEDOUT;
  }
  if (s->first)
    fail(what, s->first, s->why);
}

c10::intrusive_ptr<c10d::ProcessGroup> create(const c10::intrusive_ptr<c10d::Store>& store,
                                              int rank, int size,
                                              std::chrono::milliseconds timeout) {
  return c10::make_intrusive<ProcessGroupTPU>(store, rank, size, timeout);
}

}  // namespace tpu_torch
