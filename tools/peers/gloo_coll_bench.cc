// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// gloo_coll_bench: Gloo's all-reduce, broadcast and all-gather over its TCP
// device on 127.0.0.1, measured the way tools/bench_coll.c (tpbench coll)
// measures ours, so that the two can be put side by side.
//
//   gloo_coll_bench [--ranks N] [--sizes LIST] [--iters N]
//
// The parent forks N ranks; they meet through a gloo::rendezvous::FileStore
// in a fresh temporary directory and connect a full mesh.  float32 sums
// (Gloo's default all-reduce algorithm, its ring); broadcast from rank 0;
// all-gather of SIZE bytes per rank into N * SIZE.  For every collective and
// size: one warm-up operation, then --iters operations back to back, each
// timed by every rank on its own; the ranks send their times to the parent
// over a pipe; an operation's time is the slowest rank's, and the figure
// printed is the median over the operations.  Bus bandwidth follows
// nccl-tests: all-reduce SIZE * 2(N-1)/N, broadcast SIZE, all-gather
// N * SIZE * (N-1)/N, per second (GB/s = 10^9 bytes per second).
//
// Output, one line per collective and size:
//   peer=gloo transport=tcp coll=all-reduce ranks=2 size=1048576 iters=10 time_us=.. busbw=..

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

namespace {

constexpr int kMaxRanks = 8;
constexpr int kMaxIters = 1000;
const char *const kNames[] = { "all-reduce", "broadcast", "all-gather" };

struct Options {
	int ranks = 2;
	int iters = 10;
	std::vector<unsigned long long> sizes{ 4, 65536, 1 << 20, 16 << 20, 64 << 20 };
};

double nowSeconds()
{
	return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
		.count();
}

bool parseSize(const std::string &s, unsigned long long *out)
{
	char *end;
	unsigned long long v = std::strtoull(s.c_str(), &end, 10);

	if (end == s.c_str())
		return false;
	if (*end == 'K' || *end == 'k')
		v <<= 10, end++;
	else if (*end == 'M' || *end == 'm')
		v <<= 20, end++;
	else if (*end == 'G' || *end == 'g')
		v <<= 30, end++;
	if (*end || v < 4 || v > (1ull << 30))
		return false;
	*out = v;
	return true;
}

void oneOp(int kind, const std::shared_ptr<gloo::Context> &ctx, float *in, float *out,
	   size_t count)
{
	if (kind == 0) {
		gloo::AllreduceOptions o(ctx);

		o.setInput(in, count);
		o.setOutput(out, count);
		o.setReduceFunction(static_cast<void (*)(void *, const void *, const void *, size_t)>(
			&gloo::sum<float>));
		gloo::allreduce(o);
	} else if (kind == 1) {
		gloo::BroadcastOptions o(ctx);

		o.setOutput(out, count);
		o.setRoot(0);
		gloo::broadcast(o);
	} else {
		gloo::AllgatherOptions o(ctx);

		o.setInput(in, count);
		o.setOutput(out, count * (size_t)ctx->size);
		gloo::allgather(o);
	}
}

// One rank: connect, then every collective and size; times go to @fd.
int worker(const Options &opt, int rank, const std::string &dir, int fd)
{
	unsigned long long max = *std::max_element(opt.sizes.begin(), opt.sizes.end());
	std::vector<float> in(max / 4, 1.0f), out(max / 4 * (size_t)opt.ranks, 0.0f);
	gloo::transport::tcp::attr attr;

	attr.hostname = "127.0.0.1";
	attr.ai_family = AF_INET;
	auto dev = gloo::transport::tcp::CreateDevice(attr);
	gloo::rendezvous::FileStore store(dir);
	auto rctx = std::make_shared<gloo::rendezvous::Context>(rank, opt.ranks);

	rctx->setTimeout(std::chrono::seconds(60));
	rctx->connectFullMesh(store, dev);
	std::shared_ptr<gloo::Context> ctx = rctx;

	for (int kind = 0; kind < 3; kind++)
		for (unsigned long long bytes : opt.sizes) {
			size_t count = bytes / 4;

			oneOp(kind, ctx, in.data(), out.data(), count);	// warm-up
			for (int it = 0; it < opt.iters; it++) {
				double t0 = nowSeconds();

				oneOp(kind, ctx, in.data(), out.data(), count);
				t0 = nowSeconds() - t0;
				if (write(fd, &t0, sizeof(t0)) != (ssize_t)sizeof(t0))
					return 1;
			}
		}
	return 0;
}

int usage()
{
	std::fprintf(stderr, "usage: gloo_coll_bench [--ranks 1..%d] [--sizes 4,64K,1M] "
			     "[--iters 1..%d]\n", kMaxRanks, kMaxIters);
	return 2;
}

} // namespace

int main(int argc, char **argv)
{
	Options opt;

	for (int i = 1; i < argc; i++) {
		std::string a = argv[i];

		if (i + 1 >= argc)
			return usage();
		std::string v = argv[++i];
		if (a == "--ranks") {
			opt.ranks = std::atoi(v.c_str());
		} else if (a == "--iters") {
			opt.iters = std::atoi(v.c_str());
		} else if (a == "--sizes") {
			size_t pos = 0;

			opt.sizes.clear();
			while (pos <= v.size()) {
				size_t comma = v.find(',', pos);
				unsigned long long s;

				if (comma == std::string::npos)
					comma = v.size();
				if (!parseSize(v.substr(pos, comma - pos), &s))
					return usage();
				opt.sizes.push_back(s);
				pos = comma + 1;
			}
		} else {
			return usage();
		}
	}
	if (opt.ranks < 1 || opt.ranks > kMaxRanks || opt.iters < 1 || opt.iters > kMaxIters ||
	    opt.sizes.empty())
		return usage();

	char tmpl[] = "/tmp/gloo_coll_bench.XXXXXX";
	if (!mkdtemp(tmpl)) {
		std::perror("gloo_coll_bench: mkdtemp");
		return 1;
	}
	std::string dir = tmpl;
	std::vector<pid_t> pids;
	std::vector<int> fds;

	for (int r = 0; r < opt.ranks; r++) {
		int p[2];

		if (pipe(p)) {
			std::perror("gloo_coll_bench: pipe");
			return 1;
		}
		std::fflush(nullptr);
		pid_t pid = fork();
		if (pid == 0) {
			int rc = 1;

			close(p[0]);
			// A rank whose parent died must not wait forever for it.
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			try {
				rc = worker(opt, r, dir, p[1]);
			} catch (const std::exception &e) {
				std::fprintf(stderr, "gloo_coll_bench: rank %d: %s\n", r, e.what());
			}
			_exit(rc);
		}
		close(p[1]);
		pids.push_back(pid);
		fds.push_back(p[0]);
	}

	int rc = 0;
	int n = opt.ranks;
	for (int kind = 0; kind < 3 && !rc; kind++)
		for (unsigned long long bytes : opt.sizes) {
			std::vector<double> slowest(opt.iters, 0.0);

			for (int it = 0; it < opt.iters && !rc; it++)
				for (int r = 0; r < n; r++) {
					double t;

					if (read(fds[r], &t, sizeof(t)) != (ssize_t)sizeof(t)) {
						rc = 1;
						break;
					}
					slowest[it] = std::max(slowest[it], t);
				}
			if (rc)
				break;
			std::sort(slowest.begin(), slowest.end());
			double t = slowest[opt.iters / 2];
			double bus = kind == 0 ? 2.0 * (n - 1) / n : kind == 1 ? 1.0 : (double)(n - 1);
			unsigned long long b = bytes / 4 * 4;
			std::printf("peer=gloo transport=tcp coll=%s ranks=%d size=%llu iters=%d "
				    "time_us=%.1f busbw=%.3f\n", kNames[kind], n, b, opt.iters,
				    t * 1e6, (double)b * bus / t / 1e9);
			std::fflush(stdout);
		}
	for (int r = 0; r < n; r++) {
		int status;

		close(fds[r]);
		if (rc)
			kill(pids[r], SIGKILL);
		if (waitpid(pids[r], &status, 0) != pids[r] || !WIFEXITED(status) ||
		    WEXITSTATUS(status))
			rc = 1;
	}
	std::error_code ec;
	std::filesystem::remove_all(dir, ec);
	return rc;
}
