// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// tp_ref_bench: measure the reference TensorPipe library (Debian's
// libtensorpipe) between two processes, so that our numbers have a peer to be
// compared with.
//
//   tp_ref_bench [--transport uv|shm] [--channel basic|cma] [options]
//
// By default one invocation forks: the child serves, the parent measures and
// prints.  --server and --connect URL run the two sides as separate programs.
//
// Two measurements, each a ping-pong driven entirely from TensorPipe's own
// callbacks (no hand-off to another thread inside the timed loop):
//
//   rtt  a message with one payload of --payload bytes (64), echoed back by
//        the server; round trip in microseconds: average, median, 90th
//        percentile over --iters round trips (2000) after --warmup (200).
//   bw   a message with one CPU tensor of each --sizes size (64K,1M,16M,64M),
//        answered by a tiny acknowledgement (a message with a short metadata
//        string and nothing else).  The one-way time of a tensor is taken as
//        the whole cycle, tensor out plus acknowledgement back, so the
//        acknowledgement's own latency is charged to the transfer (it matters
//        at 64 KiB only).  GB/s = 10^9 bytes per second, size / average cycle.
//
// The server receives tensors into one pre-faulted buffer, the client sends
// from another: a steady state, as a training loop reusing buffers sees it.
//
// Output, one line per measurement, for grep and awk:
//   peer=tensorpipe transport=shm channel=cma metric=rtt_us size=64 iters=2000 avg=.. p50=.. p90=..
//   peer=tensorpipe transport=shm channel=cma metric=bw size=1048576 iters=.. us_avg=.. us_p50=.. gbps=..

#include <tensorpipe/tensorpipe.h>

#include <getopt.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

const char kAck[] = "ack";
const char kBye[] = "bye";

struct Options {
  std::string transport = "shm";
  std::string channel = "cma";
  std::string connectUrl;
  bool serverOnly = false;
  bool doRtt = true;
  bool doBw = true;
  size_t payload = 64;
  int iters = 2000;
  int warmup = 200;
  std::vector<size_t> sizes{64u << 10, 1u << 20, 16u << 20, 64u << 20};
  // Bytes moved per size: iterations = budget / size, clamped below.
  size_t bwBudget = size_t(1) << 30;
  int bwMinIters = 5;
  int bwMaxIters = 2000;
  int bwWarmup = 2;
  unsigned watchdog = 150;
};

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "tp_ref_bench: %s\n", what.c_str());
  std::fflush(stderr);
  _exit(1);
}

void check(const tensorpipe::Error& error, const char* where) {
  if (error) {
    die(std::string(where) + ": " + error.what());
  }
}

// A one-shot latch the main thread waits on while callbacks do the work.
class Latch {
 public:
  void open() {
    std::lock_guard<std::mutex> lock(mutex_);
    open_ = true;
    cv_.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [this] { return open_; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool open_ = false;
};

// Page-aligned, pre-faulted buffer.
class Buffer {
 public:
  explicit Buffer(size_t size) : size_(size ? size : 1) {
    void* p = nullptr;
    if (posix_memalign(&p, 4096, size_) != 0) {
      die("out of memory for a buffer of " + std::to_string(size_) + " bytes");
    }
    std::memset(p, 0xa5, size_);
    ptr_ = static_cast<uint8_t*>(p);
  }
  ~Buffer() {
    std::free(ptr_);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  uint8_t* data() const {
    return ptr_;
  }
  size_t size() const {
    return size_;
  }

 private:
  size_t size_;
  uint8_t* ptr_ = nullptr;
};

std::shared_ptr<tensorpipe::Context> makeContext(
    const Options& opt,
    const std::string& name) {
  std::shared_ptr<tensorpipe::transport::Context> transport;
  if (opt.transport == "uv") {
    transport = tensorpipe::transport::uv::create();
  } else if (opt.transport == "shm") {
    transport = tensorpipe::transport::shm::create();
  } else {
    transport = tensorpipe::transport::ibv::create();
  }
  std::shared_ptr<tensorpipe::channel::Context> channel;
  if (opt.channel == "basic") {
    channel = tensorpipe::channel::basic::create();
  } else {
    channel = tensorpipe::channel::cma::create();
  }
  // TensorPipe silently drops what is not viable; say so instead.
  if (!transport->isViable()) {
    die("transport " + opt.transport + " is not viable on this machine" +
        (opt.transport == "ibv" ? " (no usable InfiniBand/RoCE device)" : ""));
  }
  if (!channel->isViable()) {
    die("channel " + opt.channel + " is not viable on this machine" +
        (opt.channel == "cma"
             ? " (process_vm_readv refused: ptrace restrictions, seccomp?)"
             : ""));
  }
  auto ctx = std::make_shared<tensorpipe::Context>(
      tensorpipe::ContextOptions().name(name));
  // Only the transport and channel under test are registered, so that the
  // pipe cannot quietly negotiate something else.
  ctx->registerTransport(0, opt.transport, std::move(transport));
  ctx->registerChannel(0, opt.channel, std::move(channel));
  return ctx;
}

std::string listenUrl(const Options& opt) {
  if (opt.transport == "uv") {
    return "uv://127.0.0.1"; // port 0: the kernel picks one
  }
  if (opt.transport == "shm") {
    return "shm://"; // empty: an abstract socket name is generated
  }
  return "ibv://127.0.0.1";
}

// ---------------------------------------------------------------- server --

// Echoes payloads, swallows tensors (into one buffer), answers each tensor
// message with kAck, and stops after answering kBye.
class Server {
 public:
  Server(std::shared_ptr<tensorpipe::Pipe> pipe, size_t maxTensor)
      : pipe_(std::move(pipe)), sink_(maxTensor), payload_(1 << 16) {}

  void run() {
    next();
    done_.wait();
  }

 private:
  void next() {
    pipe_->readDescriptor(
        [this](const tensorpipe::Error& error, tensorpipe::Descriptor desc) {
          check(error, "server readDescriptor");
          onDescriptor(std::move(desc));
        });
  }

  void onDescriptor(tensorpipe::Descriptor desc) {
    tensorpipe::Allocation alloc;
    size_t off = 0;
    for (const auto& p : desc.payloads) {
      if (off + p.length > payload_.size()) {
        die("server: payloads larger than 64 KiB");
      }
      alloc.payloads.push_back({payload_.data() + off});
      off += p.length;
    }
    for (const auto& t : desc.tensors) {
      if (t.length > sink_.size() || desc.tensors.size() != 1) {
        die("server: expected one tensor of at most " +
            std::to_string(sink_.size()) + " bytes");
      }
      alloc.tensors.push_back({tensorpipe::CpuBuffer{sink_.data()}});
    }
    auto shared = std::make_shared<tensorpipe::Descriptor>(std::move(desc));
    pipe_->read(std::move(alloc), [this, shared](const tensorpipe::Error& e) {
      check(e, "server read");
      reply(*shared);
    });
  }

  void reply(const tensorpipe::Descriptor& desc) {
    const bool bye = desc.metadata == kBye;
    tensorpipe::Message msg;
    msg.metadata = bye ? kBye : kAck;
    size_t off = 0;
    for (const auto& p : desc.payloads) {
      tensorpipe::Message::Payload out;
      out.data = payload_.data() + off;
      out.length = p.length;
      msg.payloads.push_back(std::move(out));
      off += p.length;
    }
    // The echo goes out of the buffer the next read fills; that is safe in a
    // ping-pong, where the next message only comes after this reply.
    pipe_->write(std::move(msg), [](const tensorpipe::Error& e) {
      check(e, "server write");
    });
    if (!bye) {
      next(); // reads queue behind the write; no need to wait for it
      return;
    }
    // The client closes first, once it has the goodbye; wait for that so
    // that our own close cannot overtake the goodbye in flight.
    pipe_->readDescriptor(
        [this](const tensorpipe::Error& error, tensorpipe::Descriptor) {
          if (!error) {
            die("server: message after goodbye");
          }
          done_.open();
        });
  }

  std::shared_ptr<tensorpipe::Pipe> pipe_;
  Buffer sink_;
  Buffer payload_;
  Latch done_;
};

size_t maxSize(const Options& opt) {
  size_t m = 1;
  for (size_t s : opt.sizes) {
    m = std::max(m, s);
  }
  return m;
}

// Serves one pipe.  announce receives the URL the client must connect to.
void serve(const Options& opt, const std::function<void(std::string)>& announce) {
  auto ctx = makeContext(opt, "server");
  auto listener = ctx->listen({listenUrl(opt)});
  announce(listener->url(opt.transport));

  std::shared_ptr<tensorpipe::Pipe> pipe;
  Latch accepted;
  listener->accept([&](const tensorpipe::Error& error,
                       std::shared_ptr<tensorpipe::Pipe> p) {
    check(error, "accept");
    pipe = std::move(p);
    accepted.open();
  });
  accepted.wait();
  {
    Server server(pipe, opt.doBw ? maxSize(opt) : 1);
    server.run();
    ctx->join();
  }
}

// ---------------------------------------------------------------- client --

struct Stats {
  double avg, p50, p90;
};

Stats summarize(std::vector<double> us) {
  Stats s{0, 0, 0};
  if (us.empty()) {
    return s;
  }
  double sum = 0;
  for (double v : us) {
    sum += v;
  }
  std::sort(us.begin(), us.end());
  auto pct = [&](double q) {
    size_t i = static_cast<size_t>(q * static_cast<double>(us.size() - 1) + 0.5);
    return us[std::min(i, us.size() - 1)];
  };
  s.avg = sum / static_cast<double>(us.size());
  s.p50 = pct(0.5);
  s.p90 = pct(0.9);
  return s;
}

// Runs warmup + iters cycles of "write msg, read the reply", chaining each
// cycle from the previous one's read callback, and returns the cycle times
// (microseconds) of the measured ones.
class PingPong {
 public:
  PingPong(
      tensorpipe::Pipe& pipe,
      size_t payload,
      const Buffer* tensor,
      size_t tensorLen,
      int warmup,
      int iters)
      : pipe_(pipe),
        payloadLen_(payload),
        tensor_(tensor),
        tensorLen_(tensorLen),
        warmup_(warmup),
        iters_(iters),
        out_(payload ? payload : 1),
        in_(payload ? payload : 1) {
    times_.reserve(static_cast<size_t>(iters));
  }

  std::vector<double> run() {
    cycle();
    done_.wait();
    return std::move(times_);
  }

 private:
  void cycle() {
    tensorpipe::Message msg;
    if (payloadLen_) {
      tensorpipe::Message::Payload p;
      p.data = out_.data();
      p.length = payloadLen_;
      msg.payloads.push_back(std::move(p));
    }
    if (tensor_) {
      tensorpipe::Message::Tensor t;
      t.buffer = tensorpipe::CpuBuffer{tensor_->data()};
      t.length = tensorLen_;
      msg.tensors.push_back(std::move(t));
    }
    start_ = Clock::now();
    pipe_.write(std::move(msg), [](const tensorpipe::Error& e) {
      check(e, "client write");
    });
    pipe_.readDescriptor(
        [this](const tensorpipe::Error& e, tensorpipe::Descriptor desc) {
          check(e, "client readDescriptor");
          tensorpipe::Allocation alloc;
          for (const auto& p : desc.payloads) {
            if (p.length > in_.size()) {
              die("client: reply payload too large");
            }
            alloc.payloads.push_back({in_.data()});
          }
          if (!desc.tensors.empty()) {
            die("client: unexpected tensor in reply");
          }
          pipe_.read(std::move(alloc), [this](const tensorpipe::Error& e2) {
            check(e2, "client read");
            onReply();
          });
        });
  }

  void onReply() {
    const auto end = Clock::now();
    if (done_count_ >= warmup_) {
      times_.push_back(
          std::chrono::duration<double, std::micro>(end - start_).count());
    }
    if (++done_count_ < warmup_ + iters_) {
      cycle();
    } else {
      done_.open();
    }
  }

  tensorpipe::Pipe& pipe_;
  size_t payloadLen_;
  const Buffer* tensor_;
  size_t tensorLen_;
  int warmup_;
  int iters_;
  int done_count_ = 0;
  Buffer out_;
  Buffer in_;
  Clock::time_point start_;
  std::vector<double> times_;
  Latch done_;
};

void sayBye(tensorpipe::Pipe& pipe) {
  Latch got;
  tensorpipe::Message msg;
  msg.metadata = kBye;
  pipe.write(std::move(msg), [](const tensorpipe::Error& e) {
    check(e, "client write bye");
  });
  pipe.readDescriptor(
      [&](const tensorpipe::Error& e, tensorpipe::Descriptor desc) {
        check(e, "client readDescriptor bye");
        if (desc.metadata != kBye) {
          die("client: expected the server's goodbye");
        }
        pipe.read(tensorpipe::Allocation{}, [&](const tensorpipe::Error& e2) {
          check(e2, "client read bye");
          got.open();
        });
      });
  got.wait();
}

void client(const Options& opt, const std::string& url) {
  auto ctx = makeContext(opt, "client");
  auto pipe = ctx->connect(url);
  const std::string tag = "peer=tensorpipe transport=" + opt.transport +
      " channel=" + opt.channel;

  if (opt.doRtt) {
    PingPong pp(*pipe, opt.payload, nullptr, 0, opt.warmup, opt.iters);
    Stats s = summarize(pp.run());
    std::printf(
        "%s metric=rtt_us size=%zu iters=%d avg=%.2f p50=%.2f p90=%.2f\n",
        tag.c_str(), opt.payload, opt.iters, s.avg, s.p50, s.p90);
    std::fflush(stdout);
  }
  if (opt.doBw) {
    Buffer src(maxSize(opt));
    for (size_t size : opt.sizes) {
      long n = static_cast<long>(opt.bwBudget / size);
      n = std::max<long>(opt.bwMinIters, std::min<long>(opt.bwMaxIters, n));
      PingPong pp(*pipe, 0, &src, size, opt.bwWarmup, static_cast<int>(n));
      Stats s = summarize(pp.run());
      const double gbps = s.avg > 0 ? static_cast<double>(size) / (s.avg * 1e3) : 0;
      std::printf(
          "%s metric=bw size=%zu iters=%ld us_avg=%.2f us_p50=%.2f gbps=%.3f\n",
          tag.c_str(), size, n, s.avg, s.p50, gbps);
      std::fflush(stdout);
    }
  }
  sayBye(*pipe);
  pipe->close();
  ctx->close();
  ctx->join();
}

// ------------------------------------------------------------------ main --

size_t parseSize(const char* s) {
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(s, &end, 0);
  if (errno || end == s) {
    die(std::string("bad size: ") + s);
  }
  switch (*end) {
    case 'k': case 'K': v <<= 10; ++end; break;
    case 'm': case 'M': v <<= 20; ++end; break;
    case 'g': case 'G': v <<= 30; ++end; break;
    default: break;
  }
  if (*end == 'i' || *end == 'B') {
    ++end;
  }
  if (*end == 'B') {
    ++end;
  }
  if (*end) {
    die(std::string("bad size: ") + s);
  }
  return static_cast<size_t>(v);
}

int parseInt(const char* s) {
  char* end = nullptr;
  long v = std::strtol(s, &end, 10);
  if (end == s || *end || v < 0 || v > 100000000) {
    die(std::string("bad number: ") + s);
  }
  return static_cast<int>(v);
}

void usage(FILE* f) {
  std::fputs(
      "usage: tp_ref_bench [--transport uv|shm|ibv] [--channel basic|cma]\n"
      "                    [--iters N] [--warmup N] [--payload SIZE]\n"
      "                    [--sizes LIST] [--bw-bytes SIZE] [--quick]\n"
      "                    [--no-rtt] [--no-bw] [--server | --connect URL]\n"
      "                    [--watchdog SEC]\n"
      "\n"
      "Ping-pong between two processes through the reference TensorPipe\n"
      "library (default: shm transport, cma channel; one invocation forks\n"
      "the server).  rtt: a --payload (64) byte payload echoed, --iters\n"
      "(2000) round trips after --warmup (200).  bw: one CPU tensor per\n"
      "message for each of --sizes (64K,1M,16M,64M), acknowledged by a tiny\n"
      "message; about --bw-bytes (1G) per size, 5 to 2000 iterations.\n"
      "--quick: 500 round trips, 256M per size.  --server prints url=URL and\n"
      "serves one client; --connect URL is that client.  --watchdog: exit\n"
      "with an error after SEC seconds (150; 0: never).\n",
      f);
}

Options parse(int argc, char** argv) {
  Options opt;
  enum {
    kTransport = 256, kChannel, kIters, kWarmup, kPayload, kSizes, kBwBytes,
    kQuick, kNoRtt, kNoBw, kServer, kConnect, kWatchdog, kHelp
  };
  static const struct option longopts[] = {
      {"transport", required_argument, nullptr, kTransport},
      {"channel", required_argument, nullptr, kChannel},
      {"iters", required_argument, nullptr, kIters},
      {"warmup", required_argument, nullptr, kWarmup},
      {"payload", required_argument, nullptr, kPayload},
      {"sizes", required_argument, nullptr, kSizes},
      {"bw-bytes", required_argument, nullptr, kBwBytes},
      {"quick", no_argument, nullptr, kQuick},
      {"no-rtt", no_argument, nullptr, kNoRtt},
      {"no-bw", no_argument, nullptr, kNoBw},
      {"server", no_argument, nullptr, kServer},
      {"connect", required_argument, nullptr, kConnect},
      {"watchdog", required_argument, nullptr, kWatchdog},
      {"help", no_argument, nullptr, kHelp},
      {nullptr, 0, nullptr, 0},
  };
  bool itersSet = false, budgetSet = false;
  int c;
  while ((c = getopt_long(argc, argv, "h", longopts, nullptr)) != -1) {
    switch (c) {
      case kTransport: opt.transport = optarg; break;
      case kChannel: opt.channel = optarg; break;
      case kIters: opt.iters = std::max(1, parseInt(optarg)); itersSet = true; break;
      case kWarmup: opt.warmup = parseInt(optarg); break;
      case kPayload: opt.payload = parseSize(optarg); break;
      case kSizes: {
        opt.sizes.clear();
        std::string list = optarg;
        size_t pos = 0;
        while (pos <= list.size()) {
          size_t comma = list.find(',', pos);
          if (comma == std::string::npos) {
            comma = list.size();
          }
          std::string item = list.substr(pos, comma - pos);
          if (!item.empty()) {
            size_t v = parseSize(item.c_str());
            if (v == 0) {
              die("tensor sizes must be positive");
            }
            opt.sizes.push_back(v);
          }
          pos = comma + 1;
        }
        if (opt.sizes.empty()) {
          die("--sizes needs at least one size");
        }
        break;
      }
      case kBwBytes: opt.bwBudget = std::max<size_t>(1, parseSize(optarg)); budgetSet = true; break;
      case kQuick:
        if (!itersSet) {
          opt.iters = 500;
        }
        if (!budgetSet) {
          opt.bwBudget = size_t(256) << 20;
        }
        opt.warmup = std::min(opt.warmup, 100);
        break;
      case kNoRtt: opt.doRtt = false; break;
      case kNoBw: opt.doBw = false; break;
      case kServer: opt.serverOnly = true; break;
      case kConnect: opt.connectUrl = optarg; break;
      case kWatchdog: opt.watchdog = static_cast<unsigned>(parseInt(optarg)); break;
      case kHelp: case 'h': usage(stdout); std::exit(0);
      default: usage(stderr); std::exit(2);
    }
  }
  if (optind != argc) {
    usage(stderr);
    std::exit(2);
  }
  if (opt.transport != "uv" && opt.transport != "shm" && opt.transport != "ibv") {
    die("unknown transport " + opt.transport + " (uv, shm, ibv)");
  }
  // xth works only inside one process, mpt needs listeners of its own.
  if (opt.channel != "basic" && opt.channel != "cma") {
    die("unsupported channel " + opt.channel + " (basic, cma)");
  }
  if (opt.serverOnly && !opt.connectUrl.empty()) {
    die("--server and --connect exclude each other");
  }
  if (opt.payload > (1 << 16)) {
    die("--payload is limited to 64 KiB");
  }
  return opt;
}

void onAlarm(int) {
  static const char msg[] = "tp_ref_bench: watchdog expired, giving up\n";
  ssize_t r = write(2, msg, sizeof(msg) - 1);
  (void)r;
  _exit(3);
}

} // namespace

static int run(int argc, char** argv);

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    die(std::string("error: ") + e.what());
  }
}

static int run(int argc, char** argv) {
  Options opt = parse(argc, argv);
  signal(SIGALRM, onAlarm);
  alarm(opt.watchdog);

  if (opt.serverOnly) {
    // --server sizes its sink from --sizes; a client with bigger tensors fails.
    serve(opt, [](const std::string& url) {
      std::printf("url=%s\n", url.c_str());
      std::fflush(stdout);
    });
    return 0;
  }
  if (!opt.connectUrl.empty()) {
    client(opt, opt.connectUrl);
    return 0;
  }

  // Fork before any TensorPipe thread exists; the URL comes back on a pipe.
  int fds[2];
  if (pipe(fds) != 0) {
    die(std::string("pipe: ") + std::strerror(errno));
  }
  const pid_t parent = getpid();
  const pid_t child = fork();
  if (child < 0) {
    die(std::string("fork: ") + std::strerror(errno));
  }
  if (child == 0) {
    close(fds[0]);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) {
      _exit(1);
    }
    serve(opt, [&](const std::string& url) {
      std::string line = url + "\n";
      if (write(fds[1], line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
        die("cannot pass the URL to the client");
      }
      close(fds[1]);
    });
    std::fflush(stdout);
    _exit(0);
  }
  close(fds[1]);
  std::string url;
  char ch;
  ssize_t r;
  while ((r = read(fds[0], &ch, 1)) == 1 && ch != '\n') {
    url.push_back(ch);
  }
  close(fds[0]);
  if (url.empty()) {
    int status = 0;
    waitpid(child, &status, 0);
    die("the server side failed before listening");
  }
  client(opt, url);
  int status = 0;
  if (waitpid(child, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    die("the server side failed");
  }
  return 0;
}
