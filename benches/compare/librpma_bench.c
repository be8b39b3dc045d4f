/*
 * The C librpma side of rpma's comparison benchmark (benches/compare): the
 * same server protocol, cases, waits and RESULT lines as rpma_side.rs, so
 * that the two columns measure the same work. Built with gcc against
 * Debian's librpma-dev by the benchmark itself:
 *
 *   gcc -O2 -o librpma_bench librpma_bench.c -lrpma -libverbs
 *
 *   librpma_bench server ADDR PORT CONNS
 *   librpma_bench client ADDR PORT ITERS
 *   librpma_bench ir ADDR PORT CASE ITERS   (CASE: read, write, write_flush, atomic_write, commit,
 *                                           empty_poll: rpma_cq_get_wc on an empty CQ;
 *                                           read@QD, write@QD: QD posted, then reaped;
 *                                           read_last@QD: only the last one signaled)
 *   librpma_bench conns ADDR PORT N
 *   librpma_bench mserver ADDR PORT N   (N connections at once, passive)
 *   librpma_bench scch ADDR PORT N M    (N connections on shared channels, one epoll loop, M reads each)
 *   librpma_bench scrr ADDR PORT N M    (the same without channels, the CQs polled round robin)
 *   librpma_bench reg ADDR        (rpma_mr_reg, then raw ibv_reg_mr: "verbs")
 */
#include <librpma.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/epoll.h>
#include <unistd.h>

#define REGION (64 * 1024)
#define SLOTS 64
#define PING 1
#define STREAM 2
#define DONE 3
#define WPP 4 /* a write ping-pong: size in bytes 1..5, count in 5..7 */
#define T_NS (60ull * 1000000000ull)

#define CHECK(x)                                                                \
	do {                                                                    \
		int r_ = (x);                                                   \
		if (r_) {                                                       \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__,  \
				#x, rpma_err_2str(r_));                         \
			exit(1);                                                \
		}                                                               \
	} while (0)

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void check_wc(const struct ibv_wc *wc)
{
	if (wc->status != IBV_WC_SUCCESS) {
		fprintf(stderr, "completion failed: %s\n", ibv_wc_status_str(wc->status));
		exit(1);
	}
}

/* one completion if there is one (checked): 1, else 0 */
static int try_get(struct rpma_cq *cq, struct ibv_wc *wc)
{
	int r = rpma_cq_get_wc(cq, 1, wc, NULL);
	if (r == RPMA_E_NO_COMPLETION)
		return 0;
	CHECK(r);
	check_wc(wc);
	return 1;
}

/*
 * busy-polls one completion (perftest's default), for at most T_NS; the
 * clock is read only once 1024 polls found nothing (as the Rust program's)
 */
static void spin(struct rpma_cq *cq, struct ibv_wc *wc)
{
	uint64_t t0 = 0;
	for (;;) {
		for (int i = 0; i < 1024; i++)
			if (try_get(cq, wc))
				return;
		if (t0 == 0)
			t0 = now_ns();
		else if (now_ns() - t0 > T_NS) {
			fprintf(stderr, "no completion within 60 s\n");
			exit(1);
		}
	}
}

/* one completion with a blocking wait (rpma_cq_wait, then get) */
static void block(struct rpma_cq *cq, struct ibv_wc *wc)
{
	CHECK(rpma_cq_wait(cq));
	CHECK(rpma_cq_get_wc(cq, 1, wc, NULL));
	check_wc(wc);
}

/* spins up to 1 ms, then blocks: the server's wait */
static void spin_then_block(struct rpma_cq *cq, struct ibv_wc *wc)
{
	uint64_t t0 = now_ns();
	while (now_ns() - t0 < 1000000)
		if (try_get(cq, wc))
			return;
	while (!try_get(cq, wc))
		CHECK(rpma_cq_wait(cq));
}

/* busy-polls until a completion of opcode op (others are skipped) */
static void spin_for(struct rpma_cq *cq, enum ibv_wc_opcode op)
{
	struct ibv_wc wc;
	do
		spin(cq, &wc);
	while (wc.opcode != op);
}

/* the byte that marks write k of a ping-pong (never 0, the initial value) */
static unsigned char marker(int k)
{
	return (unsigned char)(k % 255 + 1);
}

/* busy-polls a byte the other side writes until it is want, for at most T_NS */
static void wait_for_byte(const char *p, unsigned char want)
{
	uint64_t t0 = now_ns();
	for (;;) {
		for (int i = 0; i < 1024; i++)
			if (*(volatile const unsigned char *)p == want)
				return;
		if (now_ns() - t0 > T_NS) {
			fprintf(stderr, "the ping-pong write %d did not arrive within 60 s\n", want);
			exit(1);
		}
	}
}

static struct rpma_peer *new_peer(const char *addr, enum rpma_util_ibv_context_type type)
{
	struct ibv_context *dev;
	struct rpma_peer *peer;
	CHECK(rpma_utils_get_ibv_context(addr, type, &dev));
	CHECK(rpma_peer_new(dev, &peer));
	return peer;
}

static struct rpma_conn_cfg *new_cfg(void)
{
	struct rpma_conn_cfg *cfg;
	CHECK(rpma_conn_cfg_new(&cfg));
	CHECK(rpma_conn_cfg_set_sq_size(cfg, 128));
	CHECK(rpma_conn_cfg_set_cq_size(cfg, 256));
	CHECK(rpma_conn_cfg_set_rq_size(cfg, SLOTS));
	CHECK(rpma_conn_cfg_set_timeout(cfg, 60000));
	return cfg;
}

static void expect(struct rpma_conn *conn, enum rpma_conn_event want)
{
	enum rpma_conn_event ev;
	CHECK(rpma_conn_next_event(conn, &ev));
	if (ev != want) {
		fprintf(stderr, "expected %s, got %s\n", rpma_utils_conn_event_2str(want),
			rpma_utils_conn_event_2str(ev));
		exit(1);
	}
}

static void *alloc(size_t len)
{
	void *p = NULL;
	if (posix_memalign(&p, 4096, len)) {
		fprintf(stderr, "out of memory\n");
		exit(1);
	}
	memset(p, 0, len);
	return p;
}

/* the region's descriptor (written into desc) as private data */
static struct rpma_conn_private_data descriptor(struct rpma_mr_local *mr, char desc[64])
{
	size_t dsize;
	CHECK(rpma_mr_get_descriptor_size(mr, &dsize));
	CHECK(rpma_mr_get_descriptor(mr, desc));
	struct rpma_conn_private_data pdata = {desc, (uint8_t)dsize};
	return pdata;
}

/* listens, then tells the orchestrator it is ready */
static struct rpma_ep *listen_ready(struct rpma_peer *peer, const char *addr, const char *port)
{
	struct rpma_ep *ep;
	CHECK(rpma_ep_listen(peer, addr, port, &ep));
	printf("READY\n");
	fflush(stdout);
	return ep;
}

static int server(const char *addr, const char *port, int conns)
{
	struct rpma_peer *peer = new_peer(addr, RPMA_UTIL_IBV_CONTEXT_LOCAL);
	char *region = alloc(REGION), *slots = alloc(SLOTS * 8), *reply = alloc(8);
	struct rpma_mr_local *mr, *slots_mr, *reply_mr;
	CHECK(rpma_mr_reg(peer, region, REGION,
		RPMA_MR_USAGE_READ_SRC | RPMA_MR_USAGE_WRITE_DST | RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY, &mr));
	CHECK(rpma_mr_reg(peer, slots, SLOTS * 8, RPMA_MR_USAGE_RECV, &slots_mr));
	CHECK(rpma_mr_reg(peer, reply, 8, RPMA_MR_USAGE_SEND, &reply_mr));
	char *wsrc = alloc(REGION);
	struct rpma_mr_local *wsrc_mr;
	CHECK(rpma_mr_reg(peer, wsrc, REGION, RPMA_MR_USAGE_WRITE_SRC, &wsrc_mr));
	char desc[64];
	struct rpma_conn_private_data pdata = descriptor(mr, desc);
	struct rpma_ep *ep = listen_ready(peer, addr, port);
	struct rpma_conn_cfg *cfg = new_cfg();
	for (int c = 0; c < conns; c++) {
		struct rpma_conn_req *req;
		struct rpma_conn *conn;
		struct rpma_cq *cq;
		CHECK(rpma_ep_next_conn_req(ep, cfg, &req));
		struct rpma_conn_private_data cpd;
		struct rpma_mr_remote *target = NULL;
		CHECK(rpma_conn_req_get_private_data(req, &cpd));
		if (cpd.len >= 21 && rpma_mr_remote_from_descriptor(cpd.ptr, cpd.len, &target))
			target = NULL;
		for (uintptr_t i = 0; i < SLOTS; i++)
			CHECK(rpma_conn_req_recv(req, slots_mr, i * 8, 8, (void *)i));
		CHECK(rpma_conn_req_connect(&req, &pdata, &conn));
		expect(conn, RPMA_CONN_ESTABLISHED);
		CHECK(rpma_conn_get_cq(conn, &cq));
		for (;;) {
			struct ibv_wc wc;
			spin_then_block(cq, &wc);
			if (wc.opcode != IBV_WC_RECV)
				continue;
			uintptr_t i = (uintptr_t)wc.wr_id;
			char kind = slots[i * 8];
			if (kind == DONE)
				break;
			CHECK(rpma_recv(conn, slots_mr, i * 8, 8, (void *)i));
			if (kind == PING)
				CHECK(rpma_send(conn, reply_mr, 0, 8, RPMA_F_COMPLETION_ALWAYS, NULL));
			if (kind == WPP) {
				uint32_t size;
				uint16_t n;
				memcpy(&size, slots + i * 8 + 1, 4);
				memcpy(&n, slots + i * 8 + 5, 2);
				if (!target) {
					fprintf(stderr, "a write ping-pong needs the client's descriptor\n");
					exit(1);
				}
				for (int k = 1; k <= n; k++) {
					wait_for_byte(region + size - 1, marker(k));
					wsrc[size - 1] = (char)marker(k);
					CHECK(rpma_write(conn, target, 0, wsrc_mr, 0, size, RPMA_F_COMPLETION_ALWAYS,
						NULL));
					spin_for(cq, IBV_WC_RDMA_WRITE);
				}
			}
		}
		expect(conn, RPMA_CONN_CLOSED);
		CHECK(rpma_conn_disconnect(conn));
		CHECK(rpma_conn_delete(&conn));
		if (target)
			CHECK(rpma_mr_remote_delete(&target));
	}
	CHECK(rpma_conn_cfg_delete(&cfg));
	CHECK(rpma_ep_shutdown(&ep));
	CHECK(rpma_mr_dereg(&wsrc_mr));
	free(wsrc);
	CHECK(rpma_mr_dereg(&reply_mr));
	CHECK(rpma_mr_dereg(&slots_mr));
	CHECK(rpma_mr_dereg(&mr));
	CHECK(rpma_peer_delete(&peer));
	free(region);
	free(slots);
	free(reply);
	return 0;
}

struct client {
	struct rpma_peer *peer;
	struct rpma_conn *conn;
	struct rpma_cq *cq;
	struct rpma_mr_remote *remote;
	struct rpma_mr_local *local, *msg, *rbuf;
	char *local_buf, *msg_buf, *rbuf_buf;
	/* where the server's ping-pong writes land; its descriptor is sent */
	struct rpma_mr_local *wdst;
	char *wdst_buf;
	struct rpma_conn_private_data wdst_pd;
	char wdst_desc[64];
};

static void connect_client_cfg(struct client *c, const char *addr, const char *port, struct rpma_conn_cfg *cfg);

static void connect_client(struct client *c, const char *addr, const char *port)
{
	struct rpma_conn_cfg *cfg = new_cfg();
	connect_client_cfg(c, addr, port, cfg);
	CHECK(rpma_conn_cfg_delete(&cfg));
}

static void connect_client_cfg(struct client *c, const char *addr, const char *port, struct rpma_conn_cfg *cfg)
{
	uint64_t t0 = now_ns();
	for (;;) {
		struct rpma_conn_req *req;
		enum rpma_conn_event ev;
		CHECK(rpma_conn_req_new(c->peer, addr, port, cfg, &req));
		CHECK(rpma_conn_req_connect(&req, c->wdst ? &c->wdst_pd : NULL, &c->conn));
		CHECK(rpma_conn_next_event(c->conn, &ev));
		if (ev == RPMA_CONN_ESTABLISHED)
			break;
		CHECK(rpma_conn_delete(&c->conn));
		if (ev != RPMA_CONN_REJECTED || now_ns() - t0 > T_NS) {
			fprintf(stderr, "connecting failed: %s\n", rpma_utils_conn_event_2str(ev));
			exit(1);
		}
		struct timespec ts = {0, 50000000};
		nanosleep(&ts, NULL);
	}
	struct rpma_conn_private_data pdata;
	CHECK(rpma_conn_get_private_data(c->conn, &pdata));
	CHECK(rpma_mr_remote_from_descriptor(pdata.ptr, pdata.len, &c->remote));
	CHECK(rpma_conn_get_cq(c->conn, &c->cq));
}

static void client_regions(struct client *c)
{
	c->local_buf = alloc(REGION);
	c->msg_buf = alloc(8);
	c->rbuf_buf = alloc(8);
	CHECK(rpma_mr_reg(c->peer, c->local_buf, REGION, RPMA_MR_USAGE_READ_DST | RPMA_MR_USAGE_WRITE_SRC,
		&c->local));
	CHECK(rpma_mr_reg(c->peer, c->msg_buf, 8, RPMA_MR_USAGE_SEND, &c->msg));
	CHECK(rpma_mr_reg(c->peer, c->rbuf_buf, 8, RPMA_MR_USAGE_RECV, &c->rbuf));
}

static void free_regions(struct client *c)
{
	CHECK(rpma_mr_dereg(&c->rbuf));
	CHECK(rpma_mr_dereg(&c->msg));
	CHECK(rpma_mr_dereg(&c->local));
	free(c->local_buf);
	free(c->msg_buf);
	free(c->rbuf_buf);
}

/* The case, resolved once from its name so that the measured loops do not
 * compare strings (the Rust side does the same). */
enum op { OP_READ, OP_WRITE, OP_SEND, OP_WRITE_FLUSH, OP_ATOMIC_WRITE, OP_PINGPONG, OP_COMMIT, OP_EMPTY_POLL };

static enum op op_of(const char *cs)
{
	static const char *names[] = {"read", "write", "send", "write_flush",
				      "atomic_write", "pingpong", "commit", "empty_poll"};
	for (int i = 0; i < (int)(sizeof(names) / sizeof(names[0])); i++)
		if (!strcmp(cs, names[i]))
			return (enum op)i;
	fprintf(stderr, "unknown case %s\n", cs);
	exit(2);
}

static void post_flags(struct client *c, enum op op, size_t size, int flags)
{
	if (op == OP_READ)
		CHECK(rpma_read(c->conn, c->local, 0, c->remote, 0, size, flags, NULL));
	else if (op == OP_WRITE)
		CHECK(rpma_write(c->conn, c->remote, 0, c->local, 0, size, flags, NULL));
	else
		CHECK(rpma_send(c->conn, c->msg, 0, 8, flags, NULL));
}

static void post(struct client *c, enum op op, size_t size)
{
	post_flags(c, op, size, RPMA_F_COMPLETION_ALWAYS);
}

typedef void (*wait_fn)(struct rpma_cq *, struct ibv_wc *);

static void once(struct client *c, enum op op, size_t size, wait_fn wait)
{
	struct ibv_wc wc;
	if (op == OP_WRITE_FLUSH) {
		CHECK(rpma_write(c->conn, c->remote, 0, c->local, 0, size, RPMA_F_COMPLETION_ON_ERROR, NULL));
		CHECK(rpma_flush(c->conn, c->remote, 0, size, RPMA_FLUSH_TYPE_VISIBILITY,
			RPMA_F_COMPLETION_ALWAYS, NULL));
		wait(c->cq, &wc);
	} else if (op == OP_ATOMIC_WRITE) {
		const char v[8] = {7, 7, 7, 7, 7, 7, 7, 7};
		CHECK(rpma_atomic_write(c->conn, c->remote, 0, v, RPMA_F_COMPLETION_ALWAYS, NULL));
		wait(c->cq, &wc);
	} else if (op == OP_COMMIT) {
		/* librpma example 07's commit: the data, its flush, the pointer to
		 * it, the pointer's flush; only the last one signaled */
		const uint64_t at = 64;
		CHECK(rpma_write(c->conn, c->remote, at, c->local, 0, 8, RPMA_F_COMPLETION_ON_ERROR, NULL));
		CHECK(rpma_flush(c->conn, c->remote, at, 8, RPMA_FLUSH_TYPE_VISIBILITY, RPMA_F_COMPLETION_ON_ERROR,
			NULL));
		CHECK(rpma_atomic_write(c->conn, c->remote, 0, (const char *)&at, RPMA_F_COMPLETION_ON_ERROR, NULL));
		CHECK(rpma_flush(c->conn, c->remote, 0, 8, RPMA_FLUSH_TYPE_VISIBILITY, RPMA_F_COMPLETION_ALWAYS,
			NULL));
		wait(c->cq, &wc);
	} else if (op == OP_EMPTY_POLL) {
		/* a busy-polling loop's miss: nothing posted, nothing to get */
		int r = rpma_cq_get_wc(c->cq, 1, &wc, NULL);
		if (r != RPMA_E_NO_COMPLETION) {
			fprintf(stderr, "empty_poll: rpma_cq_get_wc returned %d\n", r);
			exit(1);
		}
	} else if (op == OP_PINGPONG) {
		CHECK(rpma_recv(c->conn, c->rbuf, 0, 8, NULL));
		CHECK(rpma_send(c->conn, c->msg, 0, 8, RPMA_F_COMPLETION_ALWAYS, NULL));
		wait(c->cq, &wc);
		wait(c->cq, &wc);
	} else {
		post(c, op, size);
		wait(c->cq, &wc);
	}
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* prints (and frees) iters latencies in µs */
static void print_lat(const char *cs, size_t size, double *t, int iters, double sum)
{
	qsort(t, iters, sizeof(double), cmp);
#define AT(q) t[(size_t)(iters * (q)) < (size_t)iters ? (size_t)(iters * (q)) : (size_t)iters - 1]
	printf("RESULT lat librpma %s %zu %d %.3f %.3f %.3f %.3f %.3f %.3f\n", cs, size, iters, t[0], t[iters / 2],
		sum / iters, AT(0.99), AT(0.999), t[iters - 1]);
	fflush(stdout);
	free(t);
}

static void latency(struct client *c, const char *cs, size_t size, int iters)
{
	double *t = malloc(sizeof(double) * iters), sum = 0;
	enum op op = op_of(cs);
	if (op == OP_PINGPONG)
		c->msg_buf[0] = PING;
	for (int i = 0; i < iters / 10; i++)
		once(c, op, size, spin);
	for (int i = 0; i < iters; i++) {
		uint64_t t0 = now_ns();
		once(c, op, size, spin);
		t[i] = (double)(now_ns() - t0) / 1000.0;
		if (op == OP_PINGPONG)
			t[i] /= 2; /* perftest reports half the round trip */
		sum += t[i];
	}
	print_lat(cs, size, t, iters, sum);
}

/* A ping-pong of size-byte writes (perftest's ib_write_lat): the client
 * writes, the server sees the last byte change and writes back. Half the
 * round trip, as perftest reports it. */
static void write_pingpong(struct client *c, size_t size, int iters)
{
	int n = iters + iters / 10;
	double *t = malloc(sizeof(double) * iters), sum = 0;
	uint32_t sz = (uint32_t)size;
	uint16_t cnt = (uint16_t)n;
	c->msg_buf[0] = WPP;
	memcpy(c->msg_buf + 1, &sz, 4);
	memcpy(c->msg_buf + 5, &cnt, 2);
	struct ibv_wc wc;
	CHECK(rpma_send(c->conn, c->msg, 0, 8, RPMA_F_COMPLETION_ALWAYS, NULL));
	spin(c->cq, &wc);
	for (int k = 1; k <= n; k++) {
		c->local_buf[size - 1] = (char)marker(k);
		uint64_t t0 = now_ns();
		CHECK(rpma_write(c->conn, c->remote, 0, c->local, 0, size, RPMA_F_COMPLETION_ALWAYS, NULL));
		wait_for_byte(c->wdst_buf + size - 1, marker(k));
		double rtt = (double)(now_ns() - t0) / 1000.0;
		spin_for(c->cq, IBV_WC_RDMA_WRITE); /* as the Rust side, before local is rewritten */
		if (k > n - iters) {
			t[k - 1 - (n - iters)] = rtt / 2;
			sum += rtt / 2;
		}
	}
	print_lat("write_pingpong", size, t, iters, sum);
}

static double stream(struct client *c, const char *cs, size_t size, int qd, int iters)
{
	struct ibv_wc wc[64];
	int posted = 0, done = 0;
	enum op op = op_of(cs);
	if (op == OP_SEND)
		c->msg_buf[0] = STREAM;
	uint64_t t0 = now_ns();
	while (done < iters) {
		while (posted < iters && posted - done < qd) {
			post(c, op, size);
			posted++;
		}
		int got = 0;
		int r = rpma_cq_get_wc(c->cq, 64, wc, &got);
		if (r == RPMA_E_NO_COMPLETION) {
			if (now_ns() - t0 > T_NS) {
				fprintf(stderr, "no completion within 60 s\n");
				exit(1);
			}
			continue;
		}
		CHECK(r);
		for (int i = 0; i < got; i++)
			check_wc(&wc[i]);
		done += got;
	}
	return (double)(now_ns() - t0) / 1e9;
}

static void close_client(struct client *c)
{
	struct ibv_wc wc;
	c->msg_buf[0] = DONE;
	CHECK(rpma_send(c->conn, c->msg, 0, 8, RPMA_F_COMPLETION_ALWAYS, NULL));
	spin(c->cq, &wc);
	CHECK(rpma_conn_disconnect(c->conn));
	expect(c->conn, RPMA_CONN_CLOSED);
	CHECK(rpma_mr_remote_delete(&c->remote));
	CHECK(rpma_conn_delete(&c->conn));
}

static int client(const char *addr, const char *port, int iters)
{
	static const size_t lat_sizes[] = {8, 64, 256, 1024, 4096, 16384, 65536};
	static const size_t bw_sizes[] = {4096, 65536};
	static const int qds[] = {1, 4, 16, 64};
	static const char *rw[] = {"read", "write"};
	static const char *eight[] = {"write_flush", "atomic_write", "pingpong"};
	struct client c = {0};
	c.peer = new_peer(addr, RPMA_UTIL_IBV_CONTEXT_REMOTE);
	c.wdst_buf = alloc(REGION);
	CHECK(rpma_mr_reg(c.peer, c.wdst_buf, REGION, RPMA_MR_USAGE_WRITE_DST, &c.wdst));
	c.wdst_pd = descriptor(c.wdst, c.wdst_desc);
	connect_client(&c, addr, port);
	client_regions(&c);
	for (int k = 0; k < 2; k++)
		for (size_t s = 0; s < sizeof(lat_sizes) / sizeof(*lat_sizes); s++)
			latency(&c, rw[k], lat_sizes[s], iters);
	for (int k = 0; k < 3; k++)
		latency(&c, eight[k], 8, iters);
	for (size_t s = 0; s < sizeof(lat_sizes) / sizeof(*lat_sizes); s++)
		write_pingpong(&c, lat_sizes[s], iters);
	for (int k = 0; k < 2; k++)
		for (int s = 0; s < 2; s++)
			for (int q = 0; q < 4; q++) {
				stream(&c, rw[k], bw_sizes[s], qds[q], iters / 10);
				double secs = stream(&c, rw[k], bw_sizes[s], qds[q], iters);
				printf("RESULT bw librpma %s %zu %d %d %.6f\n", rw[k], bw_sizes[s], qds[q], iters,
					iters / secs / 1e6);
				fflush(stdout);
			}
	double secs = stream(&c, "send", 8, 16, iters * 4);
	printf("RESULT bw librpma send 8 16 %d %.6f\n", iters * 4, iters * 4 / secs / 1e6);
	close_client(&c);
	free_regions(&c);
	CHECK(rpma_mr_dereg(&c.wdst));
	free(c.wdst_buf);
	CHECK(rpma_peer_delete(&c.peer));
	return 0;
}

/*
 * `qd` operations posted, then reaped up to 64 per rpma_cq_get_wc, with a
 * blocking wait whenever the CQ is empty: the `CASE@QD` cases of `ir`.
 * `last`: only the last one signaled (`CASE_last@QD`), one completion.
 */
static void batch(struct client *c, enum op op, int qd, int last)
{
	struct ibv_wc wc[64];
	for (int i = 0; i < qd; i++)
		post_flags(c, op, 8, !last || i == qd - 1 ? RPMA_F_COMPLETION_ALWAYS : RPMA_F_COMPLETION_ON_ERROR);
	int done = 0, want = last ? 1 : qd;
	while (done < want) {
		int got = 0;
		int r = rpma_cq_get_wc(c->cq, 64, wc, &got);
		if (r == RPMA_E_NO_COMPLETION) {
			CHECK(rpma_cq_wait(c->cq));
			continue;
		}
		CHECK(r);
		for (int i = 0; i < got; i++)
			check_wc(&wc[i]);
		done += got;
	}
}

static int client_ir(const char *addr, const char *port, const char *cs, int iters)
{
	struct client c = {0};
	c.peer = new_peer(addr, RPMA_UTIL_IBV_CONTEXT_REMOTE);
	connect_client(&c, addr, port);
	client_regions(&c);
	char name[32];
	snprintf(name, sizeof(name), "%s", cs);
	char *at = strchr(name, '@');
	int qd = at ? atoi(at + 1) : 0;
	if (at)
		*at = 0;
	char *last = at ? strstr(name, "_last") : NULL;
	if (last)
		*last = 0;
	/* `CASE_spin`: the completion busy-polled, as the latency cases do */
	char *spun = at ? NULL : strstr(name, "_spin");
	if (spun)
		*spun = 0;
	enum op op = op_of(name);
	if (qd > 0) {
		for (int i = 0; i < iters / qd; i++)
			batch(&c, op, qd, last != NULL);
	} else {
		for (int i = 0; i < iters; i++)
			once(&c, op, 8, spun ? spin : block);
	}
	close_client(&c);
	free_regions(&c);
	CHECK(rpma_peer_delete(&c.peer));
	return 0;
}

/* The commit's latency alone (one round of the interleaved comparison). */
static int client_commit(const char *addr, const char *port, int iters)
{
	struct client c = {0};
	c.peer = new_peer(addr, RPMA_UTIL_IBV_CONTEXT_REMOTE);
	connect_client(&c, addr, port);
	client_regions(&c);
	latency(&c, "commit", 8, iters);
	close_client(&c);
	free_regions(&c);
	CHECK(rpma_peer_delete(&c.peer));
	return 0;
}

static int client_conns(const char *addr, const char *port, int n)
{
	struct client c = {0};
	c.peer = new_peer(addr, RPMA_UTIL_IBV_CONTEXT_REMOTE);
	client_regions(&c);
	uint64_t t0 = now_ns();
	for (int i = 0; i < n; i++) {
		connect_client(&c, addr, port);
		close_client(&c);
	}
	printf("RESULT rate librpma conn %d %.6f\n", n, (double)(now_ns() - t0) / 1e9);
	free_regions(&c);
	CHECK(rpma_peer_delete(&c.peer));
	return 0;
}

/* the mapping at addr's AnonHugePages in kB (/proc/self/smaps), -1 if not
 * found: transparent huge pages pin in far fewer steps */
static long anon_huge_kb(const void *addr)
{
	char line[256], start[32];
	long kb = -1;
	int in = 0;
	FILE *f = fopen("/proc/self/smaps", "r");
	if (!f)
		return -1;
	snprintf(start, sizeof(start), "%lx-", (unsigned long)(uintptr_t)addr);
	while (fgets(line, sizeof(line), f)) {
		if (!in)
			in = !strncmp(line, start, strlen(start));
		else if (sscanf(line, "AnonHugePages: %ld kB", &kb) == 1)
			break;
	}
	fclose(f);
	return kb;
}

/* 1 GiB as 2 MiB regions, then as one region: librpma, then raw verbs */
static int registration(const char *addr)
{
	const size_t gib = 1ull << 30, chunk = 2ull << 20, n = gib / chunk;
	struct ibv_context *dev;
	struct rpma_peer *peer;
	CHECK(rpma_utils_get_ibv_context(addr, RPMA_UTIL_IBV_CONTEXT_LOCAL, &dev));
	CHECK(rpma_peer_new(dev, &peer));
	char *buf = mmap(NULL, gib, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buf == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	for (size_t i = 0; i < gib; i += 4096)
		buf[i] = 1; /* fault every page in before timing */
	printf("INFO-THP librpma reg start%%2M 0x%zx AnonHugePages %ld kB\n", (size_t)((uintptr_t)buf % chunk),
	       anon_huge_kb(buf));
	int usage = RPMA_MR_USAGE_READ_SRC | RPMA_MR_USAGE_WRITE_DST;
	struct rpma_mr_local **mrs = calloc(n, sizeof(*mrs));
	uint64_t t0 = now_ns();
	for (size_t i = 0; i < n; i++)
		CHECK(rpma_mr_reg(peer, buf + i * chunk, chunk, usage, &mrs[i]));
	for (size_t i = 0; i < n; i++)
		CHECK(rpma_mr_dereg(&mrs[i]));
	printf("RESULT rate librpma reg_2m %zu %.6f\n", n, (double)(now_ns() - t0) / 1e9);
	t0 = now_ns();
	CHECK(rpma_mr_reg(peer, buf, gib, usage, &mrs[0]));
	CHECK(rpma_mr_dereg(&mrs[0]));
	printf("RESULT rate librpma reg_1g 1 %.6f\n", (double)(now_ns() - t0) / 1e9);
	CHECK(rpma_peer_delete(&peer));

	/* the same with raw verbs, on the access flags librpma chose above */
	int access = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
	struct ibv_pd *pd = ibv_alloc_pd(dev);
	struct ibv_mr **raw = calloc(n, sizeof(*raw));
	if (!pd || !raw) {
		fprintf(stderr, "ibv_alloc_pd failed\n");
		return 1;
	}
	t0 = now_ns();
	for (size_t i = 0; i < n; i++)
		if (!(raw[i] = ibv_reg_mr(pd, buf + i * chunk, chunk, access))) {
			perror("ibv_reg_mr");
			return 1;
		}
	for (size_t i = 0; i < n; i++)
		ibv_dereg_mr(raw[i]);
	printf("RESULT rate verbs reg_2m %zu %.6f\n", n, (double)(now_ns() - t0) / 1e9);
	t0 = now_ns();
	if (!(raw[0] = ibv_reg_mr(pd, buf, gib, access))) {
		perror("ibv_reg_mr");
		return 1;
	}
	ibv_dereg_mr(raw[0]);
	printf("RESULT rate verbs reg_1g 1 %.6f\n", (double)(now_ns() - t0) / 1e9);
	ibv_dealloc_pd(pd);
	munmap(buf, gib);
	free(mrs);
	free(raw);
	return 0;
}

/* Accepts n connections at once (each given the region), then waits for all
 * of them to close: the passive side of the shared-channel scale case. */
static int server_multi(const char *addr, const char *port, int n)
{
	struct rpma_peer *peer = new_peer(addr, RPMA_UTIL_IBV_CONTEXT_LOCAL);
	char *region = alloc(REGION);
	struct rpma_mr_local *mr;
	CHECK(rpma_mr_reg(peer, region, REGION, RPMA_MR_USAGE_READ_SRC | RPMA_MR_USAGE_WRITE_DST, &mr));
	char desc[64];
	struct rpma_conn_private_data pdata = descriptor(mr, desc);
	struct rpma_ep *ep = listen_ready(peer, addr, port);
	struct rpma_conn_cfg *cfg = new_cfg();
	struct rpma_conn **conns = calloc(n, sizeof(*conns));
	for (int i = 0; i < n; i++) {
		struct rpma_conn_req *req;
		CHECK(rpma_ep_next_conn_req(ep, cfg, &req));
		CHECK(rpma_conn_req_connect(&req, &pdata, &conns[i]));
		expect(conns[i], RPMA_CONN_ESTABLISHED);
	}
	for (int i = 0; i < n; i++) {
		expect(conns[i], RPMA_CONN_CLOSED);
		CHECK(rpma_conn_disconnect(conns[i]));
		CHECK(rpma_conn_delete(&conns[i]));
	}
	free(conns);
	CHECK(rpma_conn_cfg_delete(&cfg));
	CHECK(rpma_ep_shutdown(&ep));
	CHECK(rpma_mr_dereg(&mr));
	CHECK(rpma_peer_delete(&peer));
	free(region);
	return 0;
}

/* This process's resident set (VmRSS, KiB) once its n connections are up,
 * as the Rust side prints it. */
static void print_mem(const char *imp, int n)
{
	char line[256];
	long kib = 0;
	FILE *f = fopen("/proc/self/status", "r");
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld", &kib) == 1)
			break;
	if (f)
		fclose(f);
	printf("INFO-MEM %s scch%d %ld\n", imp, n, kib);
	fflush(stdout);
}

/* Disconnects the n clients, then waits for each to close and deletes it. */
static void close_many(struct client *cs, int n)
{
	for (int i = 0; i < n; i++)
		CHECK(rpma_conn_disconnect(cs[i].conn));
	for (int i = 0; i < n; i++) {
		expect(cs[i].conn, RPMA_CONN_CLOSED);
		CHECK(rpma_mr_remote_delete(&cs[i].remote));
		CHECK(rpma_conn_delete(&cs[i].conn));
	}
}

/* n connections, each with its CQ on a shared completion channel, driven by
 * one epoll loop: every connection keeps one 8-byte read in flight until it
 * has done m; prints the total rate. */
static int client_scch(const char *addr, const char *port, int n, int m)
{
	struct rpma_peer *peer = new_peer(addr, RPMA_UTIL_IBV_CONTEXT_REMOTE);
	struct rpma_conn_cfg *cfg = new_cfg();
	CHECK(rpma_conn_cfg_set_compl_channel(cfg, true));
	struct client *cs = calloc(n, sizeof(*cs));
	char *buf = alloc(8 * n);
	struct rpma_mr_local *local;
	CHECK(rpma_mr_reg(peer, buf, 8 * n, RPMA_MR_USAGE_READ_DST, &local));
	int ep = epoll_create1(EPOLL_CLOEXEC);
	int *posted = calloc(n, sizeof(int));
	for (int i = 0; i < n; i++) {
		cs[i].peer = peer;
		connect_client_cfg(&cs[i], addr, port, cfg);
		int fd;
		CHECK(rpma_conn_get_compl_fd(cs[i].conn, &fd));
		struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
		if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev)) {
			perror("epoll_ctl");
			exit(1);
		}
	}
	print_mem("librpma", n);
	long done = 0, total = (long)n * m;
	uint64_t t0 = now_ns();
	for (int i = 0; i < n; i++) {
		CHECK(rpma_read(cs[i].conn, local, 8 * i, cs[i].remote, 0, 8, RPMA_F_COMPLETION_ALWAYS, NULL));
		posted[i] = 1;
	}
	struct epoll_event evs[64];
	long sleeps = 0;
	while (done < total) {
		sleeps++;
		int k = epoll_wait(ep, evs, 64, 60000);
		if (k <= 0) {
			fprintf(stderr, "epoll_wait: %d\n", k);
			exit(1);
		}
		for (int e = 0; e < k; e++) {
			int i = (int)evs[e].data.u32;
			struct rpma_cq *cq;
			CHECK(rpma_conn_wait(cs[i].conn, 0, &cq, NULL));
			struct ibv_wc wc;
			while (try_get(cq, &wc)) {
				done++;
				if (posted[i] < m) {
					CHECK(rpma_read(cs[i].conn, local, 8 * i, cs[i].remote, 0, 8,
						RPMA_F_COMPLETION_ALWAYS, NULL));
					posted[i]++;
				}
			}
		}
	}
	printf("RESULT rate librpma scch%d %ld %.6f\n", n, total, (double)(now_ns() - t0) / 1e9);
	printf("INFO-SLEEPS librpma scch%d %ld\n", n, sleeps);
	fflush(stdout);
	close_many(cs, n);
	close(ep);
	CHECK(rpma_mr_dereg(&local));
	CHECK(rpma_conn_cfg_delete(&cfg));
	CHECK(rpma_peer_delete(&peer));
	free(buf);
	free(posted);
	free(cs);
	return 0;
}

/* n connections with their own CQs and no channels, served round robin by
 * one thread: each pass takes at most one completion from each CQ and
 * re-posts that connection's read, m each (rpma_side.rs's client_scrr). */
static int client_scrr(const char *addr, const char *port, int n, int m)
{
	struct rpma_peer *peer = new_peer(addr, RPMA_UTIL_IBV_CONTEXT_REMOTE);
	struct rpma_conn_cfg *cfg = new_cfg();
	struct client *cs = calloc(n, sizeof(*cs));
	struct rpma_cq **cqs = calloc(n, sizeof(*cqs));
	char *buf = alloc(8 * n);
	struct rpma_mr_local *local;
	CHECK(rpma_mr_reg(peer, buf, 8 * n, RPMA_MR_USAGE_READ_DST, &local));
	int *posted = calloc(n, sizeof(int));
	for (int i = 0; i < n; i++) {
		cs[i].peer = peer;
		connect_client_cfg(&cs[i], addr, port, cfg);
		CHECK(rpma_conn_get_cq(cs[i].conn, &cqs[i]));
	}
	print_mem("librpma-rr", n);
	long done = 0, total = (long)n * m, idle = 0;
	uint64_t t0 = now_ns();
	for (int i = 0; i < n; i++) {
		CHECK(rpma_read(cs[i].conn, local, 8 * i, cs[i].remote, 0, 8, RPMA_F_COMPLETION_ALWAYS, NULL));
		posted[i] = 1;
	}
	while (done < total) {
		long before = done;
		for (int i = 0; i < n; i++) {
			struct ibv_wc wc;
			if (!try_get(cqs[i], &wc))
				continue;
			done++;
			if (posted[i] < m) {
				CHECK(rpma_read(cs[i].conn, local, 8 * i, cs[i].remote, 0, 8,
					RPMA_F_COMPLETION_ALWAYS, NULL));
				posted[i]++;
			}
		}
		if (done == before && (++idle & 1023) == 0 && now_ns() - t0 > T_NS) {
			fprintf(stderr, "scrr: no completion within the timeout\n");
			exit(1);
		}
	}
	printf("RESULT rate librpma-rr scch%d %ld %.6f\n", n, total, (double)(now_ns() - t0) / 1e9);
	printf("INFO-SLEEPS librpma-rr scch%d %ld\n", n, idle);
	fflush(stdout);
	close_many(cs, n);
	CHECK(rpma_mr_dereg(&local));
	CHECK(rpma_conn_cfg_delete(&cfg));
	CHECK(rpma_peer_delete(&peer));
	free(buf);
	free(posted);
	free(cqs);
	free(cs);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 5 && !strcmp(argv[1], "server"))
		return server(argv[2], argv[3], atoi(argv[4]));
	if (argc >= 5 && !strcmp(argv[1], "client"))
		return client(argv[2], argv[3], atoi(argv[4]));
	if (argc >= 6 && !strcmp(argv[1], "ir"))
		return client_ir(argv[2], argv[3], argv[4], atoi(argv[5]));
	if (argc >= 5 && !strcmp(argv[1], "commit"))
		return client_commit(argv[2], argv[3], atoi(argv[4]));
	if (argc >= 5 && !strcmp(argv[1], "mserver"))
		return server_multi(argv[2], argv[3], atoi(argv[4]));
	if (argc >= 6 && !strcmp(argv[1], "scch"))
		return client_scch(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]));
	if (argc >= 6 && !strcmp(argv[1], "scrr"))
		return client_scrr(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]));
	if (argc >= 5 && !strcmp(argv[1], "conns"))
		return client_conns(argv[2], argv[3], atoi(argv[4]));
	if (argc >= 3 && !strcmp(argv[1], "reg"))
		return registration(argv[2]);
	fprintf(stderr, "usage: see the comment at the top of librpma_bench.c\n");
	return 2;
}
