/*
 * example_peer: the contracts of librpma 1.3.0's examples (examples/NN-*),
 * written for rpma's tests from a description of their behaviour (private
 * data, registered sizes and usages, offsets, where an expected value sits,
 * round semantics, teardown order, printed lines), so that CI can pair every
 * Rust example with "librpma's example" without librpma's sources. No code
 * of librpma's examples is used here.
 *
 *   example_peer EXAMPLE server ADDR PORT [ARGS...]
 *   example_peer EXAMPLE client ADDR PORT [ARGS...]
 *
 * EXAMPLE is one of 01 02 03 04 05 06 06scch 07 08 08srq 09 09scch 10 11 12
 * 12scch 13; ARGS are the C example's own arguments (after ADDR PORT). The
 * lines printed on stdout, and on stderr apart from librpma's log, are the C
 * examples' lines. The peer is DRAM-only (no libpmem): where a C example
 * takes a <pmem-path>, the peer refuses one and prints, as a libpmem build of
 * the example does without a path, "No <pmem-path> provided. Using DRAM
 * instead."
 *
 * Deliberate differences from librpma's examples, none visible on the wire:
 * - every wait is bounded (EXAMPLE_PEER_WAIT_MS per wait, default 30 s;
 *   EXAMPLE_PEER_TIMEOUT seconds for the whole run, default 120), and an
 *   expired wait is an error;
 * - a client retries a rejected connection every 100 ms for up to 10 s
 *   (librpma's clients try once; 01 retries 10 times 5 s apart), so a test
 *   need not wait until the server listens;
 * - every error exits 1, also where a C example prints one and exits 0;
 *   the peer's own messages start with "example_peer: error:";
 * - peer input is checked before use (private data length, descriptor
 *   sizes, completion lengths, offsets), and strings from the peer are
 *   printed only within their buffers;
 * - completions are taken in any order where librpma's scch variants expect
 *   a fixed one;
 * - extra, test-only arguments: 06/06scch server [<idle-seconds>] (default
 *   15, as librpma's); nothing else.
 *
 * 09/09scch's messages are protobuf (proto2, every field required fixed64),
 * encoded and decoded here by hand: request = 09 <offset> 11 <length>
 * 19 <op_context> (27 bytes), response = 09 <op_context> (9 bytes), each
 * value u64 little-endian.
 */
#define _GNU_SOURCE
#include <librpma.h>
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------- */
/* Constants of librpma's examples                                    */

#define KILOBYTE 1024
#define HELLO_STR_SIZE 1024
#define HELLO_STR_OFFSET 4 /* struct hello_t { u32 lang; char str[1024]; } */
#define HELLO_T_SIZE (HELLO_STR_OFFSET + HELLO_STR_SIZE)
#define DESCRIPTORS_MAX_SIZE 24
#define COMMON_DATA_SIZE 28 /* u16 data_offset, u8 mr_desc_size, u8 pcfg_desc_size, 24 bytes */
#define FLUSH_ID 0xF01DULL
#define MSG_SIZE 8 /* ping-pong messages */
#define I_M_DONE UINT64_MAX
#define NAME_SIZE 32 /* 06 */
#define CLIENT_MAX 10 /* 06, 13 */
#define LOG_USED_OFFSET 8 /* 07: struct log { char sig[8]; u64 used; char data[1024]; } */
#define LOG_DATA_OFFSET 16
#define LOG_SIZE (LOG_DATA_OFFSET + 1024)
#define GPSPM_MSG_SIZE_MAX 512 /* 09 */
#define GPSPM_SEND_OFFSET 0
#define GPSPM_RECV_OFFSET 512
#define GPSPM_REQ_SIZE 27
#define GPSPM_RESP_SIZE 9

#define NO_PMEM_MSG "No <pmem-path> provided. Using DRAM instead.\n"

/* each wait's bound (EXAMPLE_PEER_WAIT_MS, default 30 s) */
static int64_t WAIT_MS = 30000;
#define CONNECT_RETRY_MS 10000

struct common_data {
	uint16_t data_offset;
	uint8_t mr_desc_size;
	uint8_t pcfg_desc_size;
	char descriptors[DESCRIPTORS_MAX_SIZE];
};

_Static_assert(sizeof(struct common_data) == COMMON_DATA_SIZE, "common_data layout");

static const char *Addr, *Port;

#define ERR(...) do { fprintf(stderr, "example_peer: error: " __VA_ARGS__); fputc('\n', stderr); } while (0)

/* Runs a librpma call; on failure prints it and returns -1 from the caller. */
#define TRY(call) do { int r_ = (call); if (r_) { \
	ERR("%s failed: %s", #call, rpma_err_2str(r_)); return -1; } } while (0)
/* As TRY, returning NULL. */
#define TRYN(call) do { int r_ = (call); if (r_) { \
	ERR("%s failed: %s", #call, rpma_err_2str(r_)); return NULL; } } while (0)

/* ---------------------------------------------------------------- */
/* Resources: everything created is recorded here and released in    */
/* reverse order when the example ends, on every path.                */

enum kind { R_MEM, R_PEER, R_EP, R_MR, R_RMR, R_CONN, R_REQ, R_CCFG, R_PCFG, R_SRQ, R_SCFG };

struct res {
	enum kind kind;
	void *h;
};

#define RES_MAX 128
static struct res Res[RES_MAX];
static int NRes;

static int release(struct res *r)
{
	int ret = 0;
	void *h = r->h;
	r->h = NULL;
	if (h == NULL)
		return 0;
	switch (r->kind) {
	case R_MEM: free(h); break;
	case R_PEER: { struct rpma_peer *p = h; ret = rpma_peer_delete(&p); break; }
	case R_EP: { struct rpma_ep *p = h; ret = rpma_ep_shutdown(&p); break; }
	case R_MR: { struct rpma_mr_local *p = h; ret = rpma_mr_dereg(&p); break; }
	case R_RMR: { struct rpma_mr_remote *p = h; ret = rpma_mr_remote_delete(&p); break; }
	case R_CONN: {
		struct rpma_conn *p = h;
		(void) rpma_conn_disconnect(p);
		ret = rpma_conn_delete(&p);
		break;
	}
	case R_REQ: { struct rpma_conn_req *p = h; ret = rpma_conn_req_delete(&p); break; }
	case R_CCFG: { struct rpma_conn_cfg *p = h; ret = rpma_conn_cfg_delete(&p); break; }
	case R_PCFG: { struct rpma_peer_cfg *p = h; ret = rpma_peer_cfg_delete(&p); break; }
	case R_SRQ: { struct rpma_srq *p = h; ret = rpma_srq_delete(&p); break; }
	case R_SCFG: { struct rpma_srq_cfg *p = h; ret = rpma_srq_cfg_delete(&p); break; }
	}
	if (ret)
		ERR("releasing a resource (kind %d) failed: %s", (int)r->kind, rpma_err_2str(ret));
	return ret ? -1 : 0;
}

/* Records h (not NULL); when the table is full releases h and returns NULL. */
static void *own(enum kind kind, void *h)
{
	if (NRes == RES_MAX) {
		struct res r = {kind, h};
		ERR("too many resources");
		(void) release(&r);
		return NULL;
	}
	Res[NRes].kind = kind;
	Res[NRes].h = h;
	NRes++;
	return h;
}

/* Forgets h: it has been released or consumed by the caller. */
static void disown(void *h)
{
	for (int i = NRes - 1; i >= 0; i--)
		if (Res[i].h == h) {
			Res[i].h = NULL;
			break;
		}
	while (NRes > 0 && Res[NRes - 1].h == NULL)
		NRes--;
}

static int release_all(void)
{
	int ret = 0;
	while (NRes > 0)
		ret |= release(&Res[--NRes]);
	return ret;
}

/* Page-aligned, zeroed memory (as librpma's malloc_aligned). */
static void *alloc_mem(size_t size)
{
	void *p = NULL;
	int r = posix_memalign(&p, (size_t)sysconf(_SC_PAGESIZE), size);
	if (r) {
		ERR("posix_memalign(%zu): %s", size, strerror(r));
		return NULL;
	}
	memset(p, 0, size);
	return own(R_MEM, p);
}

/* ---------------------------------------------------------------- */
/* Bounded waits                                                      */

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * Polls fds until one is readable or deadline (now_ms() scale) passes.
 * Returns the number of ready fds, 0 on timeout, -1 on error.
 */
static int poll_until(struct pollfd *pfd, int n, int64_t deadline)
{
	for (;;) {
		int64_t left = deadline - now_ms();
		if (left < 0)
			left = 0;
		for (int i = 0; i < n; i++)
			pfd[i].revents = 0;
		int r = poll(pfd, (nfds_t)n, (int)left);
		if (r >= 0)
			return r;
		if (errno != EINTR) {
			ERR("poll: %s", strerror(errno));
			return -1;
		}
	}
}

static int wait_fd(int fd, int64_t deadline)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	return poll_until(&p, 1, deadline);
}

static int next_event(struct rpma_conn *conn, enum rpma_conn_event *ev)
{
	int fd;
	TRY(rpma_conn_get_event_fd(conn, &fd));
	int r = wait_fd(fd, now_ms() + WAIT_MS);
	if (r < 0)
		return -1;
	if (r == 0) {
		ERR("timed out waiting for a connection event");
		return -1;
	}
	TRY(rpma_conn_next_event(conn, ev));
	return 0;
}

static int expect_event(struct rpma_conn *conn, enum rpma_conn_event want)
{
	enum rpma_conn_event ev = RPMA_CONN_UNDEFINED;
	if (next_event(conn, &ev))
		return -1;
	if (ev != want) {
		fprintf(stderr, "rpma_conn_next_event returned an unexpected event: %s\n",
			rpma_utils_conn_event_2str(ev));
		return -1;
	}
	return 0;
}

/* The completion queues one side waits on. */
struct cqs {
	struct rpma_conn *conn; /* for a shared completion channel */
	struct rpma_cq *cq;
	struct rpma_cq *rcq; /* or NULL */
	bool shared;
};

static int cqs_of(struct rpma_conn *conn, bool rcq, bool shared, struct cqs *q)
{
	memset(q, 0, sizeof(*q));
	q->conn = conn;
	q->shared = shared;
	TRY(rpma_conn_get_cq(conn, &q->cq));
	if (rcq)
		TRY(rpma_conn_get_rcq(conn, &q->rcq));
	return 0;
}

/* Takes the next completion from q's queues, waiting up to WAIT_MS. */
static int next_wc_or_close(struct cqs *q, struct ibv_wc *wc, bool watch_close);

static int next_wc(struct cqs *q, struct ibv_wc *wc)
{
	return next_wc_or_close(q, wc, false);
}

/*
 * next_wc; with watch_close it also watches the connection's events and
 * returns 1 when the peer closed the connection first (RPMA_CONN_CLOSED): a
 * client's last message (DONE, unsignaled) can be flushed by its own
 * disconnect right after it, so a server waiting for it sees the close
 * instead (as examples/common's completion_or_close).
 */
static int next_wc_or_close(struct cqs *q, struct ibv_wc *wc, bool watch_close)
{
	int64_t deadline = now_ms() + WAIT_MS;
	struct rpma_cq *all[2] = {q->cq, q->rcq};
	int ncq = q->rcq ? 2 : 1;
	for (;;) {
		for (int i = 0; i < ncq; i++) {
			int n = 0;
			int r = rpma_cq_get_wc(all[i], 1, wc, &n);
			if (r == 0 && n == 1)
				return 0;
			if (r && r != RPMA_E_NO_COMPLETION) {
				ERR("rpma_cq_get_wc failed: %s", rpma_err_2str(r));
				return -1;
			}
		}
		struct pollfd pfd[3];
		int npfd = 0;
		if (q->shared) {
			TRY(rpma_conn_get_compl_fd(q->conn, &pfd[0].fd));
			npfd = 1;
		} else {
			for (int i = 0; i < ncq; i++)
				TRY(rpma_cq_get_fd(all[i], &pfd[npfd++].fd));
		}
		int ncompl = npfd;
		if (watch_close)
			TRY(rpma_conn_get_event_fd(q->conn, &pfd[npfd++].fd));
		for (int i = 0; i < npfd; i++)
			pfd[i].events = POLLIN;
		int r = poll_until(pfd, npfd, deadline);
		if (r < 0)
			return -1;
		if (r == 0) {
			ERR("timed out waiting for a completion");
			return -1;
		}
		if (npfd > ncompl && (pfd[ncompl].revents & POLLIN)) {
			if (expect_event(q->conn, RPMA_CONN_CLOSED))
				return -1;
			return 1;
		}
		for (int i = 0; i < ncompl; i++) {
			if (!(pfd[i].revents & POLLIN))
				continue;
			struct rpma_cq *got = NULL;
			int w = q->shared ? rpma_conn_wait(q->conn, 0, &got, NULL) : rpma_cq_wait(all[i]);
			if (w && w != RPMA_E_NO_COMPLETION) {
				ERR("waiting for a completion failed: %s", rpma_err_2str(w));
				return -1;
			}
		}
	}
}

/* Waits for one completion of the given opcode, printing C's messages. */
static int wait_op(struct cqs *q, enum ibv_wc_opcode op, const char *func, struct ibv_wc *wc)
{
	if (next_wc(q, wc))
		return -1;
	if (wc->status != IBV_WC_SUCCESS) {
		fprintf(stderr, "%s failed: %s\n", func, ibv_wc_status_str(wc->status));
		return -1;
	}
	if (wc->opcode != op) {
		fprintf(stderr, "unexpected wc.opcode value (0x%X != 0x%X)\n", (unsigned)wc->opcode,
			(unsigned)op);
		return -1;
	}
	return 0;
}

/* ---------------------------------------------------------------- */
/* Peers, connections, private data                                   */

static struct rpma_peer *peer_new(bool server)
{
	struct ibv_context *ctx;
	struct rpma_peer *peer;
	TRYN(rpma_utils_get_ibv_context(Addr, server ? RPMA_UTIL_IBV_CONTEXT_LOCAL :
		RPMA_UTIL_IBV_CONTEXT_REMOTE, &ctx));
	TRYN(rpma_peer_new(ctx, &peer));
	return own(R_PEER, peer);
}

static struct rpma_mr_local *mr_reg(struct rpma_peer *peer, void *ptr, size_t size, int usage)
{
	struct rpma_mr_local *mr;
	TRYN(rpma_mr_reg(peer, ptr, size, usage, &mr));
	return own(R_MR, mr);
}

static struct rpma_ep *listen_ep(struct rpma_peer *peer)
{
	struct rpma_ep *ep;
	TRYN(rpma_ep_listen(peer, Addr, Port, &ep));
	return own(R_EP, ep);
}

static struct rpma_conn_cfg *conn_cfg(uint32_t rcq_size, bool shared)
{
	struct rpma_conn_cfg *cfg;
	TRYN(rpma_conn_cfg_new(&cfg));
	if (!own(R_CCFG, cfg))
		return NULL;
	if (rcq_size)
		TRYN(rpma_conn_cfg_set_rcq_size(cfg, rcq_size));
	if (shared)
		TRYN(rpma_conn_cfg_set_compl_channel(cfg, true));
	return cfg;
}

/*
 * Waits (up to timeout_ms) for a connection request. Returns it, or NULL
 * with *timed_out set when none came, or NULL on error.
 */
static struct rpma_conn_req *next_req(struct rpma_ep *ep, const struct rpma_conn_cfg *cfg,
	int timeout_ms, bool *timed_out)
{
	int fd;
	*timed_out = false;
	TRYN(rpma_ep_get_fd(ep, &fd));
	int r = wait_fd(fd, now_ms() + timeout_ms);
	if (r < 0)
		return NULL;
	if (r == 0) {
		*timed_out = true;
		return NULL;
	}
	struct rpma_conn_req *req;
	TRYN(rpma_ep_next_conn_req(ep, cfg, &req));
	return own(R_REQ, req);
}

/* As next_req with WAIT_MS, a timeout being an error. */
static struct rpma_conn_req *wait_req(struct rpma_ep *ep, const struct rpma_conn_cfg *cfg)
{
	bool timed_out;
	struct rpma_conn_req *req = next_req(ep, cfg, WAIT_MS, &timed_out);
	if (timed_out)
		ERR("timed out waiting for a connection request");
	return req;
}

static struct rpma_conn *req_connect(struct rpma_conn_req *req,
	const struct rpma_conn_private_data *pdata)
{
	struct rpma_conn *conn;
	disown(req); /* consumed, whatever the result */
	TRYN(rpma_conn_req_connect(&req, pdata, &conn));
	return own(R_CONN, conn);
}

/* Accepts req with pdata (may be NULL) and waits for ESTABLISHED. */
static struct rpma_conn *accept_req(struct rpma_conn_req *req, void *pdata, size_t len)
{
	struct rpma_conn_private_data pd = {pdata, (uint8_t)len};
	struct rpma_conn *conn = req_connect(req, pdata ? &pd : NULL);
	if (conn == NULL || expect_event(conn, RPMA_CONN_ESTABLISHED))
		return NULL;
	return conn;
}

/* Takes the next connection request and accepts it. */
static struct rpma_conn *server_accept(struct rpma_ep *ep, const struct rpma_conn_cfg *cfg,
	void *pdata, size_t len)
{
	struct rpma_conn_req *req = wait_req(ep, cfg);
	if (req == NULL)
		return NULL;
	return accept_req(req, pdata, len);
}

/* Connects with pdata (may be NULL) and waits for ESTABLISHED. */
static struct rpma_conn *client_connect(struct rpma_peer *peer, const struct rpma_conn_cfg *cfg,
	void *pdata, size_t len)
{
	struct rpma_conn_private_data pd = {pdata, (uint8_t)len};
	int64_t deadline = now_ms() + CONNECT_RETRY_MS;
	for (;;) {
		struct rpma_conn_req *req;
		TRYN(rpma_conn_req_new(peer, Addr, Port, cfg, &req));
		if (!own(R_REQ, req))
			return NULL;
		struct rpma_conn *conn = req_connect(req, pdata ? &pd : NULL);
		if (conn == NULL)
			return NULL;
		enum rpma_conn_event ev = RPMA_CONN_UNDEFINED;
		if (next_event(conn, &ev))
			return NULL;
		if (ev == RPMA_CONN_ESTABLISHED)
			return conn;
		if (ev == RPMA_CONN_REJECTED && now_ms() < deadline) {
			disown(conn);
			(void) rpma_conn_delete(&conn);
			usleep(100 * 1000);
			continue;
		}
		fprintf(stderr, "rpma_conn_next_event returned an unexpected event: %s\n",
			rpma_utils_conn_event_2str(ev));
		return NULL;
	}
}

static int delete_conn(struct rpma_conn *conn)
{
	disown(conn);
	TRY(rpma_conn_delete(&conn));
	return 0;
}

/* Disconnects, waits for CLOSED, deletes ("closes first"). */
static int close_first(struct rpma_conn *conn)
{
	TRY(rpma_conn_disconnect(conn));
	if (expect_event(conn, RPMA_CONN_CLOSED))
		return -1;
	return delete_conn(conn);
}

/* Waits for CLOSED, disconnects, deletes ("closes second"). */
static int close_second(struct rpma_conn *conn)
{
	if (expect_event(conn, RPMA_CONN_CLOSED))
		return -1;
	TRY(rpma_conn_disconnect(conn));
	return delete_conn(conn);
}

/* Disconnects and deletes without waiting (08srq's and 13's servers). */
static int drop_conn(struct rpma_conn *conn)
{
	TRY(rpma_conn_disconnect(conn));
	return delete_conn(conn);
}

/* Fills cd with mr's descriptor (and pcfg's after it when pcfg is not NULL). */
static int make_common_data(struct rpma_mr_local *mr, uint16_t data_offset,
	struct rpma_peer_cfg *pcfg, struct common_data *cd)
{
	size_t mr_size, pcfg_size = 0;
	memset(cd, 0, sizeof(*cd));
	TRY(rpma_mr_get_descriptor_size(mr, &mr_size));
	if (pcfg)
		TRY(rpma_peer_cfg_get_descriptor_size(pcfg, &pcfg_size));
	if (mr_size + pcfg_size > DESCRIPTORS_MAX_SIZE) {
		ERR("descriptors too long (%zu + %zu > %d)", mr_size, pcfg_size, DESCRIPTORS_MAX_SIZE);
		return -1;
	}
	cd->data_offset = data_offset;
	cd->mr_desc_size = (uint8_t)mr_size;
	cd->pcfg_desc_size = (uint8_t)pcfg_size;
	TRY(rpma_mr_get_descriptor(mr, &cd->descriptors[0]));
	if (pcfg)
		TRY(rpma_peer_cfg_get_descriptor(pcfg, &cd->descriptors[mr_size]));
	return 0;
}

/* Copies the peer's common_data out of the connection's private data. */
static int get_common_data(struct rpma_conn *conn, struct common_data *cd)
{
	struct rpma_conn_private_data pd;
	TRY(rpma_conn_get_private_data(conn, &pd));
	if (pd.ptr == NULL || pd.len < COMMON_DATA_SIZE) {
		ERR("the peer's private data is too short for common_data (%u < %d)",
			pd.ptr ? (unsigned)pd.len : 0, COMMON_DATA_SIZE);
		return -1;
	}
	memcpy(cd, pd.ptr, COMMON_DATA_SIZE);
	if ((size_t)cd->mr_desc_size + cd->pcfg_desc_size > DESCRIPTORS_MAX_SIZE) {
		ERR("the peer's descriptor sizes overflow common_data (%u + %u > %d)",
			cd->mr_desc_size, cd->pcfg_desc_size, DESCRIPTORS_MAX_SIZE);
		return -1;
	}
	return 0;
}

static struct rpma_mr_remote *remote_mr(const struct common_data *cd)
{
	struct rpma_mr_remote *mr;
	TRYN(rpma_mr_remote_from_descriptor(&cd->descriptors[0], cd->mr_desc_size, &mr));
	return own(R_RMR, mr);
}

/* ---------------------------------------------------------------- */
/* Arguments                                                          */

static int parse_u64(const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s || *end) {
		ERR("not a number: \"%s\"", s);
		return -1;
	}
	*out = v;
	return 0;
}

/* The examples that may take a <pmem-path>: the peer is DRAM-only. */
static int dram_only(int argc, char **argv)
{
	if (argc >= 1) {
		ERR("%s: this peer has no PMem support (DRAM only); run it without <pmem-path>", argv[0]);
		return -1;
	}
	fputs(NO_PMEM_MSG, stderr);
	return 0;
}

/* ---------------------------------------------------------------- */
/* hello_t (03, 04, 05, 09)                                           */

static const char *const Hello[] = {"Hello world!", "\xC2\xA1" "Hola Mundo!"};

static void write_hello(char *hello, uint32_t lang)
{
	memcpy(hello, &lang, 4);
	strncpy(hello + HELLO_STR_OFFSET, Hello[lang], HELLO_STR_SIZE - 1);
	hello[HELLO_STR_OFFSET + HELLO_STR_SIZE - 1] = '\0';
}

static char *new_hello(void)
{
	char *h = alloc_mem(HELLO_T_SIZE);
	if (h)
		write_hello(h, 0);
	return h;
}

static void translate(char *hello)
{
	uint32_t lang;
	memcpy(&lang, hello, 4);
	printf("translating...\n");
	write_hello(hello, (lang + 1) % 2);
}

/* ---------------------------------------------------------------- */
/* 01-connection                                                      */

static void print_pdata_message(struct rpma_conn *conn)
{
	struct rpma_conn_private_data pd;
	if (rpma_conn_get_private_data(conn, &pd) == 0 && pd.ptr)
		printf("Received a message: %.*s\n", (int)strnlen(pd.ptr, pd.len), (char *)pd.ptr);
	else
		printf("No message received\n");
}

static int ex01_server(int argc, char **argv)
{
	char msg[] = "Hello client!";
	struct rpma_peer *peer = peer_new(true);
	struct rpma_ep *ep = peer ? listen_ep(peer) : NULL;
	struct rpma_conn *conn = ep ? server_accept(ep, NULL, msg, sizeof(msg)) : NULL;
	if (conn == NULL)
		return -1;
	print_pdata_message(conn);
	return close_first(conn);
}

static int ex01_client(int argc, char **argv)
{
	char msg[] = "Hello server!";
	struct rpma_peer *peer = peer_new(false);
	struct rpma_conn *conn = peer ? client_connect(peer, NULL, msg, sizeof(msg)) : NULL;
	if (conn == NULL)
		return -1;
	print_pdata_message(conn);
	return close_second(conn);
}

/* ---------------------------------------------------------------- */
/* 02-read-to-volatile                                                */

static int ex02_server(int argc, char **argv)
{
	const char *hello = "Hello client!";
	size_t size = strlen(hello) + 1;
	struct common_data cd;
	struct rpma_peer *peer = peer_new(true);
	struct rpma_ep *ep = peer ? listen_ep(peer) : NULL;
	char *mem = ep ? alloc_mem(size) : NULL;
	if (mem == NULL)
		return -1;
	memcpy(mem, hello, size);
	struct rpma_mr_local *mr = mr_reg(peer, mem, size, RPMA_MR_USAGE_READ_SRC);
	if (mr == NULL || make_common_data(mr, 0, NULL, &cd))
		return -1;
	struct rpma_conn *conn = server_accept(ep, NULL, &cd, sizeof(cd));
	if (conn == NULL)
		return -1;
	return close_second(conn);
}

static int ex02_client(int argc, char **argv)
{
	struct common_data cd;
	struct cqs q;
	struct ibv_wc wc;
	size_t size;
	struct rpma_peer *peer = peer_new(false);
	char *dst = peer ? alloc_mem(KILOBYTE) : NULL;
	struct rpma_mr_local *mr = dst ? mr_reg(peer, dst, KILOBYTE, RPMA_MR_USAGE_READ_DST) : NULL;
	struct rpma_conn *conn = mr ? client_connect(peer, NULL, NULL, 0) : NULL;
	if (conn == NULL || get_common_data(conn, &cd))
		return -1;
	struct rpma_mr_remote *src = remote_mr(&cd);
	if (src == NULL)
		return -1;
	TRY(rpma_mr_remote_get_size(src, &size));
	if (size > KILOBYTE) {
		fprintf(stderr, "Remote memory region size too big to reading to the sink buffer "
			"of the assumed size (%zu > %d)\n", size, KILOBYTE);
		return -1;
	}
	TRY(rpma_read(conn, mr, 0, src, 0, size, RPMA_F_COMPLETION_ALWAYS, NULL));
	if (cqs_of(conn, false, false, &q) || wait_op(&q, IBV_WC_RDMA_READ, "rpma_read()", &wc))
		return -1;
	printf("Read a message: %.*s\n", (int)strnlen(dst, KILOBYTE), dst);
	return close_first(conn);
}

/* ---------------------------------------------------------------- */
/* 03-read-to-persistent                                              */

static int ex03_server(int argc, char **argv)
{
	struct common_data cd;
	struct cqs q;
	struct ibv_wc wc;
	if (dram_only(argc, argv))
		return -1;
	char *mem = alloc_mem(HELLO_STR_SIZE);
	struct rpma_peer *peer = mem ? peer_new(true) : NULL;
	struct rpma_ep *ep = peer ? listen_ep(peer) : NULL;
	struct rpma_mr_local *mr = ep ? mr_reg(peer, mem, HELLO_STR_SIZE, RPMA_MR_USAGE_READ_DST) : NULL;
	struct rpma_conn *conn = mr ? server_accept(ep, NULL, NULL, 0) : NULL;
	if (conn == NULL || get_common_data(conn, &cd))
		return -1;
	struct rpma_mr_remote *src = remote_mr(&cd);
	if (src == NULL)
		return -1;
	if (mem[0] != '\0')
		printf("Old value: %.*s\n", (int)strnlen(mem, HELLO_STR_SIZE), mem);
	TRY(rpma_read(conn, mr, 0, src, cd.data_offset, HELLO_STR_SIZE, RPMA_F_COMPLETION_ALWAYS,
		NULL));
	if (cqs_of(conn, false, false, &q) || wait_op(&q, IBV_WC_RDMA_READ, "rpma_read()", &wc))
		return -1;
	printf("New value: %.*s\n", (int)strnlen(mem, HELLO_STR_SIZE), mem);
	return close_first(conn);
}

static int ex03_client(int argc, char **argv)
{
	struct common_data cd;
	if (dram_only(argc, argv))
		return -1;
	char *hello = new_hello();
	if (hello == NULL)
		return -1;
	printf("Next value: %s\n", hello + HELLO_STR_OFFSET);
	struct rpma_peer *peer = peer_new(false);
	struct rpma_mr_local *mr = peer ? mr_reg(peer, hello, HELLO_T_SIZE, RPMA_MR_USAGE_READ_SRC) : NULL;
	if (mr == NULL || make_common_data(mr, HELLO_STR_OFFSET, NULL, &cd))
		return -1;
	struct rpma_conn *conn = client_connect(peer, NULL, &cd, sizeof(cd));
	if (conn == NULL || close_second(conn))
		return -1;
	translate(hello);
	printf("Translation: %s\n", hello + HELLO_STR_OFFSET);
	return 0;
}

/* ---------------------------------------------------------------- */
/* 04-write-to-persistent, 05-flush-to-persistent                     */

/* The server of 04 and 05: 1024 bytes, data_offset 0; 05 adds a peer cfg. */
static int write_server(int argc, char **argv, bool ex05)
{
	struct common_data cd;
	struct rpma_peer_cfg *pcfg = NULL;
	if (dram_only(argc, argv))
		return -1;
	char *mem = alloc_mem(HELLO_STR_SIZE);
	if (mem == NULL)
		return -1;
	if (mem[0] != '\0')
		printf("Old value: %.*s\n", (int)strnlen(mem, HELLO_STR_SIZE), mem);
	if (ex05) {
		TRY(rpma_peer_cfg_new(&pcfg));
		if (!own(R_PCFG, pcfg))
			return -1;
		/* direct_write_to_pmem stays false: "on" applies only with a <pmem-path> */
	}
	struct rpma_peer *peer = peer_new(true);
	struct rpma_ep *ep = peer ? listen_ep(peer) : NULL;
	int usage = RPMA_MR_USAGE_WRITE_DST | (ex05 ? RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY :
		RPMA_MR_USAGE_READ_SRC);
	struct rpma_mr_local *mr = ep ? mr_reg(peer, mem, HELLO_STR_SIZE, usage) : NULL;
	if (mr == NULL || make_common_data(mr, 0, pcfg, &cd))
		return -1;
	struct rpma_conn *conn = server_accept(ep, NULL, &cd, sizeof(cd));
	if (conn == NULL || close_second(conn))
		return -1;
	printf("New value: %.*s\n", (int)strnlen(mem, HELLO_STR_SIZE), mem);
	return 0;
}

/* The remote region's size after data_offset must hold 1024 bytes. */
static int check_room(struct rpma_mr_remote *dst, size_t offset, const char *fmt)
{
	size_t size;
	TRY(rpma_mr_remote_get_size(dst, &size));
	size_t room = offset > size ? 0 : size - offset;
	if (room < HELLO_STR_SIZE) {
		fprintf(stderr, fmt, room, HELLO_STR_SIZE);
		return -1;
	}
	return 0;
}

#define TOO_SMALL_FMT "Remote memory region size too small for writing the data of the " \
	"assumed size (%zu < %d)\n"

static int ex04_server(int argc, char **argv)
{
	return write_server(argc, argv, false);
}

static int ex04_client(int argc, char **argv)
{
	struct common_data cd;
	struct cqs q;
	struct ibv_wc wc;
	if (dram_only(argc, argv))
		return -1;
	char *hello = new_hello();
	char *raw = hello ? alloc_mem(8) : NULL;
	if (raw == NULL)
		return -1;
	printf("Next value: %s\n", hello + HELLO_STR_OFFSET);
	struct rpma_peer *peer = peer_new(false);
	struct rpma_conn *conn = peer ? client_connect(peer, NULL, NULL, 0) : NULL;
	struct rpma_mr_local *src = conn ? mr_reg(peer, hello, HELLO_T_SIZE, RPMA_MR_USAGE_WRITE_SRC) : NULL;
	struct rpma_mr_local *raw_mr = src ? mr_reg(peer, raw, 8, RPMA_MR_USAGE_READ_DST) : NULL;
	if (raw_mr == NULL || get_common_data(conn, &cd))
		return -1;
	struct rpma_mr_remote *dst = remote_mr(&cd);
	if (dst == NULL || check_room(dst, cd.data_offset, TOO_SMALL_FMT))
		return -1;
	TRY(rpma_write(conn, dst, cd.data_offset, src, HELLO_STR_OFFSET, HELLO_STR_SIZE,
		RPMA_F_COMPLETION_ON_ERROR, NULL));
	TRY(rpma_read(conn, raw_mr, 0, dst, 0, 8, RPMA_F_COMPLETION_ALWAYS, NULL));
	if (cqs_of(conn, false, false, &q) || wait_op(&q, IBV_WC_RDMA_READ, "rpma_read()", &wc))
		return -1;
	translate(hello);
	printf("Translation: %s\n", hello + HELLO_STR_OFFSET);
	return close_first(conn);
}

static int ex05_server(int argc, char **argv)
{
	return write_server(argc, argv, true);
}

static int ex05_client(int argc, char **argv)
{
	struct common_data cd;
	struct cqs q;
	struct ibv_wc wc;
	struct rpma_peer_cfg *pcfg;
	bool direct = false;
	if (dram_only(argc, argv))
		return -1;
	char *hello = new_hello();
	if (hello == NULL)
		return -1;
	printf("Next value: %s\n", hello + HELLO_STR_OFFSET);
	struct rpma_peer *peer = peer_new(false);
	struct rpma_conn *conn = peer ? client_connect(peer, NULL, NULL, 0) : NULL;
	struct rpma_mr_local *src = conn ? mr_reg(peer, hello, HELLO_T_SIZE, RPMA_MR_USAGE_WRITE_SRC) : NULL;
	if (src == NULL || get_common_data(conn, &cd))
		return -1;
	TRY(rpma_peer_cfg_from_descriptor(&cd.descriptors[cd.mr_desc_size], cd.pcfg_desc_size, &pcfg));
	if (!own(R_PCFG, pcfg))
		return -1;
	TRY(rpma_peer_cfg_get_direct_write_to_pmem(pcfg, &direct));
	TRY(rpma_conn_apply_remote_peer_cfg(conn, pcfg));
	struct rpma_mr_remote *dst = remote_mr(&cd);
	if (dst == NULL || check_room(dst, cd.data_offset, TOO_SMALL_FMT))
		return -1;
	TRY(rpma_write(conn, dst, cd.data_offset, src, HELLO_STR_OFFSET, HELLO_STR_SIZE,
		RPMA_F_COMPLETION_ON_ERROR, NULL));
	enum rpma_flush_type type;
	if (direct) {
		printf("RPMA_FLUSH_TYPE_PERSISTENT is supported\n");
		type = RPMA_FLUSH_TYPE_PERSISTENT;
	} else {
		printf("RPMA_FLUSH_TYPE_PERSISTENT is NOT supported, RPMA_FLUSH_TYPE_VISIBILITY is used instead\n");
		type = RPMA_FLUSH_TYPE_VISIBILITY;
	}
	TRY(rpma_flush(conn, dst, cd.data_offset, HELLO_STR_SIZE, type, RPMA_F_COMPLETION_ALWAYS,
		(void *)FLUSH_ID));
	if (cqs_of(conn, false, false, &q) || next_wc(&q, &wc))
		return -1;
	if (wc.wr_id != FLUSH_ID) {
		fprintf(stderr, "unexpected wc.wr_id value (0x%" PRIX64 " != 0x%llX)\n",
			(uint64_t)wc.wr_id, FLUSH_ID);
		return -1;
	}
	if (wc.status != IBV_WC_SUCCESS) {
		fprintf(stderr, "rpma_flush() failed: %s\n", ibv_wc_status_str(wc.status));
		return -1;
	}
	translate(hello);
	printf("Translation: %s\n", hello + HELLO_STR_OFFSET);
	return close_first(conn);
}

/* ---------------------------------------------------------------- */
/* 06-multiple-connections, 06scch                                    */

static const char *const Names[] = {
	"Andy", "Chet", "Derek", "Janek", "Kacper", "Lukasz", "Oksana", "Pawel", "Piotr",
	"Tomasz", "Xiang", "Xiaoran", "Xiaoyan"
};

static int ex06_client(int argc, char **argv)
{
	struct common_data cd;
	uint64_t seed;
	if (argc < 1) {
		fprintf(stderr, "usage: example_peer 06 client <addr> <port> <seed>\n");
		return -1;
	}
	if (parse_u64(argv[0], &seed))
		return -1;
	struct rpma_peer *peer = peer_new(false);
	char *name = peer ? alloc_mem(NAME_SIZE) : NULL;
	if (name == NULL)
		return -1;
	srand((unsigned)(seed % UINT_MAX));
	strncpy(name, Names[(unsigned long)rand() % (sizeof(Names) / sizeof(Names[0]))], NAME_SIZE - 1);
	printf("My names is: %s\n", name);
	struct rpma_mr_local *mr = mr_reg(peer, name, NAME_SIZE, RPMA_MR_USAGE_READ_SRC);
	if (mr == NULL || make_common_data(mr, 0, NULL, &cd))
		return -1;
	struct rpma_conn *conn = client_connect(peer, NULL, &cd, sizeof(cd));
	if (conn == NULL)
		return -1;
	return close_second(conn);
}

struct mc_client {
	struct rpma_conn *conn;
	struct rpma_cq *cq;
	int ev_fd, cq_fd;
};

/* The connection is ready: read the client's 32-byte name into slot i. */
static int mc_fetch_name(struct mc_client *c, int i, struct rpma_mr_local *dst)
{
	struct rpma_conn_private_data pd;
	struct common_data cd;
	TRY(rpma_conn_get_private_data(c->conn, &pd));
	if (pd.ptr == NULL || pd.len < COMMON_DATA_SIZE) {
		fprintf(stderr, "[%d] received connection's private data is too small (%d < %d)\n", i,
			pd.ptr ? (int)pd.len : 0, COMMON_DATA_SIZE);
		return -1;
	}
	if (get_common_data(c->conn, &cd))
		return -1;
	struct rpma_mr_remote *src;
	TRY(rpma_mr_remote_from_descriptor(&cd.descriptors[0], cd.mr_desc_size, &src));
	int r = rpma_read(c->conn, dst, (size_t)NAME_SIZE * i, src, 0, NAME_SIZE,
		RPMA_F_COMPLETION_ALWAYS, NULL);
	(void) rpma_mr_remote_delete(&src);
	if (r) {
		ERR("rpma_read failed: %s", rpma_err_2str(r));
		return -1;
	}
	return 0;
}

/* The read is done: print the name, disconnect. */
static int mc_completion(struct mc_client *c, int i, bool scch, const char *names)
{
	struct rpma_cq *cq = c->cq;
	struct ibv_wc wc;
	int r = scch ? rpma_conn_wait(c->conn, 0, &cq, NULL) : rpma_cq_wait(c->cq);
	if (r == RPMA_E_NO_COMPLETION)
		return 0;
	if (r == 0) {
		r = rpma_cq_get_wc(cq, 1, &wc, NULL);
		if (r == RPMA_E_NO_COMPLETION)
			return 0;
	}
	if (r) {
		ERR("[%d] waiting for the read failed: %s", i, rpma_err_2str(r));
		(void) rpma_conn_disconnect(c->conn);
		return -1;
	}
	if (wc.status != IBV_WC_SUCCESS) {
		fprintf(stderr, "[%d] rpma_read() failed: %s\n", i, ibv_wc_status_str(wc.status));
		(void) rpma_conn_disconnect(c->conn);
		return -1;
	}
	if (wc.opcode != IBV_WC_RDMA_READ) {
		fprintf(stderr, "[%d] received unexpected wc.opcode value (%d != %d)\n", i,
			(int)wc.opcode, (int)IBV_WC_RDMA_READ);
		(void) rpma_conn_disconnect(c->conn);
		return -1;
	}
	const char *name = names + (size_t)NAME_SIZE * i;
	printf("- %.*s\n", (int)strnlen(name, NAME_SIZE), name);
	TRY(rpma_conn_disconnect(c->conn));
	return 0;
}

static int mc_event(struct mc_client *c, int i, struct rpma_mr_local *dst)
{
	enum rpma_conn_event ev = RPMA_CONN_UNDEFINED;
	int r = rpma_conn_next_event(c->conn, &ev);
	if (r == RPMA_E_NO_EVENT)
		return 0;
	if (r) {
		ERR("[%d] rpma_conn_next_event failed: %s", i, rpma_err_2str(r));
		(void) rpma_conn_disconnect(c->conn);
		return -1;
	}
	if (ev == RPMA_CONN_ESTABLISHED) {
		if (mc_fetch_name(c, i, dst)) {
			(void) rpma_conn_disconnect(c->conn);
			return -1;
		}
		return 0;
	}
	/* CLOSED (or anything else): the client is gone */
	r = delete_conn(c->conn);
	c->conn = NULL;
	return r;
}

static int mc_server(int argc, char **argv, bool scch)
{
	int idle_ms = 15000;
	if (argc >= 1) {
		/* test-only: <idle-seconds> (librpma's server always waits 15 s) */
		char *end;
		double s = strtod(argv[0], &end);
		if (end == argv[0] || *end || !(s > 0) || s > 3600) {
			ERR("<idle-seconds> should be a positive number (%s given)", argv[0]);
			return -1;
		}
		idle_ms = (int)(s * 1000);
	}
	struct mc_client clients[CLIENT_MAX];
	memset(clients, 0, sizeof(clients));
	struct rpma_peer *peer = peer_new(true);
	char *names = peer ? alloc_mem(NAME_SIZE * CLIENT_MAX) : NULL;
	struct rpma_mr_local *dst = names ? mr_reg(peer, names, NAME_SIZE * CLIENT_MAX,
		RPMA_MR_USAGE_READ_DST) : NULL;
	struct rpma_conn_cfg *cfg = NULL;
	if (dst && scch && (cfg = conn_cfg(0, true)) == NULL)
		return -1;
	struct rpma_ep *ep = dst ? listen_ep(peer) : NULL;
	int ep_fd;
	if (ep == NULL)
		return -1;
	TRY(rpma_ep_get_fd(ep, &ep_fd));
	printf("Today I have got in touch with:\n");
	int failed = 0;
	bool timed_out = false;
	for (;;) {
		struct pollfd pfd[1 + 2 * CLIENT_MAX];
		int who[1 + 2 * CLIENT_MAX]; /* -1: the endpoint; 2i: client i's events; 2i+1: its completions */
		int n = 0;
		pfd[n].fd = ep_fd;
		who[n++] = -1;
		for (int i = 0; i < CLIENT_MAX; i++) {
			if (clients[i].conn == NULL)
				continue;
			pfd[n].fd = clients[i].ev_fd;
			who[n++] = 2 * i;
			pfd[n].fd = clients[i].cq_fd;
			who[n++] = 2 * i + 1;
		}
		for (int k = 0; k < n; k++)
			pfd[k].events = POLLIN;
		int r = poll_until(pfd, n, now_ms() + idle_ms);
		if (r < 0)
			return -1;
		if (r == 0) {
			timed_out = true;
			break;
		}
		int k = 0;
		while (k < n && !pfd[k].revents)
			k++;
		if (k == n)
			continue;
		if (who[k] == -1) {
			struct rpma_conn_req *req;
			TRY(rpma_ep_next_conn_req(ep, cfg, &req));
			if (!own(R_REQ, req))
				return -1;
			int i = 0;
			while (i < CLIENT_MAX && clients[i].conn)
				i++;
			if (i == CLIENT_MAX) {
				/* rejected: all slots are taken */
				disown(req);
				TRY(rpma_conn_req_delete(&req));
				continue;
			}
			struct mc_client *c = &clients[i];
			if ((c->conn = req_connect(req, NULL)) == NULL)
				return -1;
			TRY(rpma_conn_get_cq(c->conn, &c->cq));
			TRY(rpma_conn_get_event_fd(c->conn, &c->ev_fd));
			if (scch)
				TRY(rpma_conn_get_compl_fd(c->conn, &c->cq_fd));
			else
				TRY(rpma_cq_get_fd(c->cq, &c->cq_fd));
		} else if (who[k] % 2 == 0) {
			failed |= mc_event(&clients[who[k] / 2], who[k] / 2, dst);
		} else {
			failed |= mc_completion(&clients[who[k] / 2], who[k] / 2, scch, names);
		}
	}
	for (int i = 0; i < CLIENT_MAX; i++)
		if (clients[i].conn)
			failed |= drop_conn(clients[i].conn);
	if (timed_out)
		fprintf(stderr, "Server timed out.\n");
	return failed ? -1 : 0;
}

static int ex06_server(int argc, char **argv)
{
	return mc_server(argc, argv, false);
}

static int ex06scch_server(int argc, char **argv)
{
	return mc_server(argc, argv, true);
}

/* ---------------------------------------------------------------- */
/* 07-atomic-write                                                    */

static int ex07_server(int argc, char **argv)
{
	struct common_data cd;
	if (dram_only(argc, argv))
		return -1;
	char *log = alloc_mem(LOG_SIZE);
	if (log == NULL)
		return -1;
	uint64_t used = LOG_DATA_OFFSET;
	memcpy(log + LOG_USED_OFFSET, &used, 8);
	struct rpma_peer *peer = peer_new(true);
	struct rpma_ep *ep = peer ? listen_ep(peer) : NULL;
	struct rpma_mr_local *mr = ep ? mr_reg(peer, log, LOG_SIZE, RPMA_MR_USAGE_WRITE_DST |
		RPMA_MR_USAGE_READ_SRC | RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY) : NULL;
	if (mr == NULL || make_common_data(mr, LOG_USED_OFFSET, NULL, &cd))
		return -1;
	struct rpma_conn *conn = server_accept(ep, NULL, &cd, sizeof(cd));
	if (conn == NULL || close_second(conn))
		return -1;
	memcpy(&used, log + LOG_USED_OFFSET, 8);
	if (used > LOG_SIZE) {
		ERR("the log's used value is beyond the log (%" PRIu64 " > %d)", used, LOG_SIZE);
		return -1;
	}
	for (uint64_t i = LOG_DATA_OFFSET; i < used; i++)
		putchar(log[i] ? log[i] : '\n');
	return 0;
}

static int ex07_client(int argc, char **argv)
{
	struct common_data cd;
	struct cqs q;
	struct ibv_wc wc;
	struct rpma_peer_cfg *pcfg;
	size_t remote_size;
	int flush_types;
	uint64_t used;
	if (argc < 1) {
		fprintf(stderr, "usage: example_peer 07 client <addr> <port> <word1> [<word2>] [..]\n");
		return -1;
	}
	char *buf = alloc_mem(KILOBYTE);
	struct rpma_peer *peer = buf ? peer_new(false) : NULL;
	struct rpma_conn *conn = peer ? client_connect(peer, NULL, NULL, 0) : NULL;
	if (conn == NULL)
		return -1;
	TRY(rpma_peer_cfg_new(&pcfg));
	if (!own(R_PCFG, pcfg))
		return -1;
	TRY(rpma_peer_cfg_set_direct_write_to_pmem(pcfg, true));
	TRY(rpma_conn_apply_remote_peer_cfg(conn, pcfg));
	struct rpma_mr_local *mr = mr_reg(peer, buf, KILOBYTE, RPMA_MR_USAGE_WRITE_SRC |
		RPMA_MR_USAGE_READ_DST);
	if (mr == NULL || get_common_data(conn, &cd))
		return -1;
	struct rpma_mr_remote *log = remote_mr(&cd);
	if (log == NULL)
		return -1;
	TRY(rpma_mr_remote_get_size(log, &remote_size));
	TRY(rpma_read(conn, mr, 0, log, cd.data_offset, 8, RPMA_F_COMPLETION_ALWAYS, NULL));
	if (cqs_of(conn, false, false, &q) || wait_op(&q, IBV_WC_RDMA_READ, "rpma_read()", &wc))
		return -1;
	memcpy(&used, buf, 8);
	printf("used value: %" PRIu64 "\n", used);
	if (remote_size <= used) {
		fprintf(stderr, "Log size exhausted.\n");
		return -1;
	}
	TRY(rpma_mr_remote_get_flush_type(log, &flush_types));
	enum rpma_flush_type type = (flush_types & RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT) ?
		RPMA_FLUSH_TYPE_PERSISTENT : RPMA_FLUSH_TYPE_VISIBILITY;
	for (int i = 0; i < argc; i++) {
		strncpy(buf, argv[i], KILOBYTE - 1);
		buf[KILOBYTE - 1] = '\0';
		size_t word_size = strlen(buf) + 1;
		if (word_size > remote_size - used) {
			fprintf(stderr, "Log size exhausted.\n");
			return -1;
		}
		TRY(rpma_write(conn, log, used, mr, 0, word_size, RPMA_F_COMPLETION_ON_ERROR, NULL));
		TRY(rpma_flush(conn, log, used, word_size, type, RPMA_F_COMPLETION_ON_ERROR, NULL));
		used += word_size;
		char used_buf[8];
		memcpy(used_buf, &used, 8);
		TRY(rpma_atomic_write(conn, log, cd.data_offset, used_buf, RPMA_F_COMPLETION_ON_ERROR,
			NULL));
		TRY(rpma_flush(conn, log, cd.data_offset, 8, type, RPMA_F_COMPLETION_ALWAYS,
			(void *)FLUSH_ID));
		if (next_wc(&q, &wc))
			return -1;
		if (wc.wr_id != FLUSH_ID) {
			fprintf(stderr, "unexpected wc.wr_id value (0x%" PRIX64 " != 0x%llX)\n",
				(uint64_t)wc.wr_id, FLUSH_ID);
			return -1;
		}
		if (wc.status != IBV_WC_SUCCESS) {
			fprintf(stderr, "rpma_flush() failed: %s\n", ibv_wc_status_str(wc.status));
			return -1;
		}
	}
	return close_first(conn);
}

/* ---------------------------------------------------------------- */
/* Ping-pong: 08, 08srq, 12, 12scch, 13                                */

/* Checks a completion as librpma's ping-pong examples do. */
static int pp_check(const struct ibv_wc *wc, const uint64_t *recv)
{
	if (wc->status != IBV_WC_SUCCESS) {
		fprintf(stderr, "rpma_%s() failed: %s\n", wc->opcode == IBV_WC_SEND ? "send" : "recv",
			ibv_wc_status_str(wc->status));
		return -1;
	}
	if (wc->opcode == IBV_WC_RECV && (wc->wr_id != (uintptr_t)recv || wc->byte_len != MSG_SIZE)) {
		fprintf(stderr, "received completion is not as expected (0x%" PRIX64 " != 0x%" PRIXPTR
			" [wc.wr_id] || %" PRIu32 " != %d [wc.byte_len])\n", (uint64_t)wc->wr_id,
			(uintptr_t)recv, wc->byte_len, MSG_SIZE);
		return -1;
	}
	if (wc->opcode != IBV_WC_RECV && wc->opcode != IBV_WC_SEND) {
		fprintf(stderr, "unexpected wc.opcode value (0x%X)\n", (unsigned)wc->opcode);
		return -1;
	}
	return 0;
}

/*
 * Waits for the receive and, when send_pending, the send, in any order;
 * with watch_close, returns 1 when the peer closed the connection first.
 */
static int pp_wait(struct cqs *q, const uint64_t *recv, bool send_pending, bool watch_close)
{
	bool got_recv = false, got_send = !send_pending;
	while (!got_recv || !got_send) {
		struct ibv_wc wc;
		int r = next_wc_or_close(q, &wc, watch_close);
		if (r == 1)
			return 1;
		if (r || pp_check(&wc, recv))
			return -1;
		if (wc.opcode == IBV_WC_RECV)
			got_recv = true;
		else
			got_send = true;
	}
	return 0;
}

struct pp {
	bool rounds_minus_one; /* 08, 12: while (--rounds); 08srq, 13: do { } while (--rounds) */
	bool client_closes_second; /* 08srq, 13 */
	uint32_t rcq_size; /* 12: 10 */
	bool shared; /* 12scch */
	const char *prefix; /* "Value", "CLIENT: Value", "SERVER: Value" */
};

static int pp_client(int argc, char **argv, const struct pp *pp)
{
	uint64_t value, rounds, sleep_us = 0;
	struct cqs q;
	char prefix[64];
	if (argc < 2) {
		fprintf(stderr, "usage: example_peer NN client <addr> <port> <seed> <rounds> [<sleep>]\n");
		return -1;
	}
	if (parse_u64(argv[0], &value) || parse_u64(argv[1], &rounds) ||
			(argc >= 3 && parse_u64(argv[2], &sleep_us)))
		return -1;
	if (pp->prefix)
		snprintf(prefix, sizeof(prefix), "%s", pp->prefix);
	else /* 13 */
		snprintf(prefix, sizeof(prefix), "[client #%d] value", (int)getpid());
	/* rounds of 0 wraps around in librpma's examples; here it is one round */
	uint64_t exchanges = rounds == 0 ? 1 : pp->rounds_minus_one ? rounds - 1 : rounds;
	struct rpma_peer *peer = peer_new(false);
	uint64_t *recv = peer ? alloc_mem(MSG_SIZE) : NULL;
	uint64_t *send = recv ? alloc_mem(MSG_SIZE) : NULL;
	struct rpma_mr_local *recv_mr = send ? mr_reg(peer, recv, MSG_SIZE, RPMA_MR_USAGE_RECV) : NULL;
	struct rpma_mr_local *send_mr = recv_mr ? mr_reg(peer, send, MSG_SIZE, RPMA_MR_USAGE_SEND) : NULL;
	struct rpma_conn_cfg *cfg = NULL;
	if (send_mr && (pp->rcq_size || pp->shared) && (cfg = conn_cfg(pp->rcq_size, pp->shared)) == NULL)
		return -1;
	struct rpma_conn *conn = send_mr ? client_connect(peer, cfg, NULL, 0) : NULL;
	if (conn == NULL || cqs_of(conn, pp->rcq_size > 0, pp->shared, &q))
		return -1;
	for (uint64_t i = 0; i < exchanges; i++) {
		TRY(rpma_recv(conn, recv_mr, 0, MSG_SIZE, recv));
		printf("%s sent: %" PRIu64 "\n", prefix, value);
		*send = value;
		TRY(rpma_send(conn, send_mr, 0, MSG_SIZE, RPMA_F_COMPLETION_ALWAYS, NULL));
		if (pp_wait(&q, recv, true, false))
			return -1;
		value = *recv;
		printf("%s received: %" PRIu64 "\n", prefix, value);
		if (sleep_us > 0)
			usleep((useconds_t)sleep_us);
	}
	*send = I_M_DONE;
	TRY(rpma_send(conn, send_mr, 0, MSG_SIZE, RPMA_F_COMPLETION_ON_ERROR, NULL));
	return pp->client_closes_second ? close_second(conn) : close_first(conn);
}

/* The server of 08, 12 and 12scch: answers N with N + 1 until DONE; closes first. */
static int pp_server(int argc, char **argv, const struct pp *pp)
{
	struct cqs q;
	struct rpma_peer *peer = peer_new(true);
	struct rpma_ep *ep = peer ? listen_ep(peer) : NULL;
	uint64_t *recv = ep ? alloc_mem(MSG_SIZE) : NULL;
	uint64_t *send = recv ? alloc_mem(MSG_SIZE) : NULL;
	struct rpma_mr_local *recv_mr = send ? mr_reg(peer, recv, MSG_SIZE, RPMA_MR_USAGE_RECV) : NULL;
	struct rpma_mr_local *send_mr = recv_mr ? mr_reg(peer, send, MSG_SIZE, RPMA_MR_USAGE_SEND) : NULL;
	struct rpma_conn_cfg *cfg = NULL;
	if (send_mr && (pp->rcq_size || pp->shared) && (cfg = conn_cfg(pp->rcq_size, pp->shared)) == NULL)
		return -1;
	struct rpma_conn_req *req = send_mr ? wait_req(ep, cfg) : NULL;
	if (req == NULL)
		return -1;
	TRY(rpma_conn_req_recv(req, recv_mr, 0, MSG_SIZE, recv));
	struct rpma_conn *conn = accept_req(req, NULL, 0);
	if (conn == NULL || cqs_of(conn, pp->rcq_size > 0, pp->shared, &q))
		return -1;
	bool send_pending = false;
	for (;;) {
		int r = pp_wait(&q, recv, send_pending, true);
		if (r < 0)
			return -1;
		if (r == 1) {
			/* the client closed first; its DONE was lost to that */
			TRY(rpma_conn_disconnect(conn));
			return delete_conn(conn);
		}
		if (*recv == I_M_DONE)
			break;
		printf("%s received: %" PRIu64 "\n", pp->prefix, *recv);
		*send = *recv + 1;
		TRY(rpma_recv(conn, recv_mr, 0, MSG_SIZE, recv));
		printf("%s sent: %" PRIu64 "\n", pp->prefix, *send);
		TRY(rpma_send(conn, send_mr, 0, MSG_SIZE, RPMA_F_COMPLETION_ALWAYS, NULL));
		send_pending = true;
	}
	return close_first(conn);
}

static const struct pp PP08 = {.rounds_minus_one = true, .prefix = "Value"};
static const struct pp PP08srq = {.client_closes_second = true, .prefix = "Value"};
static const struct pp PP12c = {.rounds_minus_one = true, .rcq_size = 10, .prefix = "CLIENT: Value"};
static const struct pp PP12s = {.rcq_size = 10, .prefix = "SERVER: Value"};
static const struct pp PP12scch_c = {.rounds_minus_one = true, .rcq_size = 10, .shared = true,
	.prefix = "CLIENT: Value"};
static const struct pp PP12scch_s = {.rcq_size = 10, .shared = true, .prefix = "SERVER: Value"};
static const struct pp PP13 = {.client_closes_second = true, .prefix = NULL};

static int ex08_server(int argc, char **argv) { return pp_server(argc, argv, &PP08); }
static int ex08_client(int argc, char **argv) { return pp_client(argc, argv, &PP08); }
static int ex08srq_client(int argc, char **argv) { return pp_client(argc, argv, &PP08srq); }
static int ex12_server(int argc, char **argv) { return pp_server(argc, argv, &PP12s); }
static int ex12_client(int argc, char **argv) { return pp_client(argc, argv, &PP12c); }
static int ex12scch_server(int argc, char **argv) { return pp_server(argc, argv, &PP12scch_s); }
static int ex12scch_client(int argc, char **argv) { return pp_client(argc, argv, &PP12scch_c); }
static int ex13_client(int argc, char **argv) { return pp_client(argc, argv, &PP13); }

/* 08srq's server: one connection on an SRQ; receives on the SRQ's CQ (s, the
 * default), the main CQ (m) or the connection's RCQ (r); sends unsignaled. */
static int ex08srq_server(int argc, char **argv)
{
	char flag = 's';
	struct rpma_srq_cfg *scfg;
	struct rpma_srq *srq;
	struct cqs q;
	uint32_t qp_num;
	if (argc >= 1) {
		if (!strcmp(argv[0], "m") || !strcmp(argv[0], "r")) {
			flag = argv[0][0];
		} else {
			fprintf(stderr, "The third parameter should be one of m or r (%s given)\n", argv[0]);
			return -1;
		}
	}
	uint64_t *recv = alloc_mem(MSG_SIZE);
	uint64_t *send = recv ? alloc_mem(MSG_SIZE) : NULL;
	struct rpma_peer *peer = send ? peer_new(true) : NULL;
	if (peer == NULL)
		return -1;
	TRY(rpma_srq_cfg_new(&scfg));
	if (!own(R_SCFG, scfg))
		return -1;
	if (flag != 's')
		TRY(rpma_srq_cfg_set_rcq_size(scfg, 0));
	TRY(rpma_srq_new(peer, scfg, &srq));
	if (!own(R_SRQ, srq))
		return -1;
	struct rpma_conn_cfg *cfg = conn_cfg(flag == 'r' ? 10 : 0, false);
	if (cfg == NULL)
		return -1;
	TRY(rpma_conn_cfg_set_srq(cfg, srq));
	struct rpma_ep *ep = listen_ep(peer);
	struct rpma_mr_local *recv_mr = ep ? mr_reg(peer, recv, MSG_SIZE, RPMA_MR_USAGE_RECV) : NULL;
	struct rpma_mr_local *send_mr = recv_mr ? mr_reg(peer, send, MSG_SIZE, RPMA_MR_USAGE_SEND) : NULL;
	if (send_mr == NULL)
		return -1;
	TRY(rpma_srq_recv(srq, recv_mr, 0, MSG_SIZE, recv));
	struct rpma_conn *conn = server_accept(ep, cfg, NULL, 0);
	if (conn == NULL)
		return -1;
	TRY(rpma_conn_get_qp_num(conn, &qp_num));
	memset(&q, 0, sizeof(q));
	if (flag == 's')
		TRY(rpma_srq_get_rcq(srq, &q.cq));
	else if (flag == 'm')
		TRY(rpma_conn_get_cq(conn, &q.cq));
	else
		TRY(rpma_conn_get_rcq(conn, &q.cq));
	for (;;) {
		struct ibv_wc wc;
		if (next_wc(&q, &wc) || pp_check(&wc, recv))
			return -1;
		if (wc.opcode != IBV_WC_RECV) {
			fprintf(stderr, "unexpected wc.opcode value (0x%X != 0x%X)\n", (unsigned)wc.opcode,
				(unsigned)IBV_WC_RECV);
			return -1;
		}
		if (*recv == I_M_DONE)
			break;
		if (wc.qp_num != qp_num) {
			fprintf(stderr, "Error: number of QP (qp_num) in the received completion (%" PRIu32
				") differs from the one of the connection (%" PRIu32 ")\n", wc.qp_num, qp_num);
			return -1;
		}
		printf("Value received: %" PRIu64 "\n", *recv);
		*send = *recv + 1;
		TRY(rpma_srq_recv(srq, recv_mr, 0, MSG_SIZE, recv));
		printf("Value sent: %" PRIu64 "\n", *send);
		TRY(rpma_send(conn, send_mr, 0, MSG_SIZE, RPMA_F_COMPLETION_ON_ERROR, NULL));
	}
	return drop_conn(conn);
}

/* 13's server: clients connect until <timeout> s pass without a request; only
 * then are their messages (all on one SRQ) answered, until each sent DONE. */
static int ex13_server(int argc, char **argv)
{
	struct rpma_conn *conns[CLIENT_MAX] = {0};
	uint32_t qps[CLIENT_MAX] = {0};
	int num_clients = 0, done = 0, failed = 0;
	struct rpma_srq *srq;
	struct cqs q;
	int timeout_ms = 5000;
	if (argc >= 1) {
		timeout_ms = atoi(argv[0]) * 1000;
		if (timeout_ms <= 0) {
			fprintf(stderr, "<timeout> should be a positive number of seconds (%s given)\n",
				argv[0]);
			return -1;
		}
	}
	size_t size = CLIENT_MAX * MSG_SIZE;
	uint64_t *recv = alloc_mem(size);
	uint64_t *send = recv ? alloc_mem(size) : NULL;
	struct rpma_peer *peer = send ? peer_new(true) : NULL;
	if (peer == NULL)
		return -1;
	TRY(rpma_srq_new(peer, NULL, &srq));
	if (!own(R_SRQ, srq))
		return -1;
	struct rpma_conn_cfg *cfg = conn_cfg(0, false);
	if (cfg == NULL)
		return -1;
	TRY(rpma_conn_cfg_set_srq(cfg, srq));
	struct rpma_ep *ep = listen_ep(peer);
	struct rpma_mr_local *recv_mr = ep ? mr_reg(peer, recv, size, RPMA_MR_USAGE_RECV) : NULL;
	struct rpma_mr_local *send_mr = recv_mr ? mr_reg(peer, send, size, RPMA_MR_USAGE_SEND) : NULL;
	if (send_mr == NULL)
		return -1;
	for (;;) {
		bool timed_out;
		struct rpma_conn_req *req = next_req(ep, cfg, timeout_ms, &timed_out);
		if (timed_out)
			break;
		if (req == NULL)
			goto end;
		if (num_clients == CLIENT_MAX) {
			fprintf(stderr, "No free slot for a new connection request.\n");
			failed = 1;
			goto end;
		}
		int i = num_clients;
		TRY(rpma_srq_recv(srq, recv_mr, (size_t)i * MSG_SIZE, MSG_SIZE, recv + i));
		if ((conns[i] = accept_req(req, NULL, 0)) == NULL) {
			failed = 1;
			goto end;
		}
		TRY(rpma_conn_get_qp_num(conns[i], &qps[i]));
		num_clients++;
		printf("The client #%i has been connected.\n", num_clients);
	}
	printf("Server ended listening.\n");
	memset(&q, 0, sizeof(q));
	TRY(rpma_srq_get_rcq(srq, &q.cq));
	while (done < num_clients) {
		struct ibv_wc wc;
		if (next_wc(&q, &wc)) {
			failed = 1;
			break;
		}
		if (wc.status != IBV_WC_SUCCESS) {
			fprintf(stderr, "rpma_srq_recv() failed: %s\n", ibv_wc_status_str(wc.status));
			failed = 1;
			break;
		}
		if (wc.opcode != IBV_WC_RECV) {
			fprintf(stderr, "received unexpected wc.opcode value (%d != %d)\n", (int)wc.opcode,
				(int)IBV_WC_RECV);
			failed = 1;
			break;
		}
		int index = -1;
		for (int i = 0; i < num_clients; i++)
			if (qps[i] == wc.qp_num)
				index = i;
		if (index < 0) {
			fprintf(stderr, "Unable to find the connection [qp#%d]\n", (int)wc.qp_num);
			failed = 1;
			break;
		}
		uintptr_t at = (uintptr_t)wc.wr_id - (uintptr_t)recv;
		if ((uintptr_t)wc.wr_id < (uintptr_t)recv || at >= size || at % MSG_SIZE ||
				wc.byte_len != MSG_SIZE) {
			ERR("unexpected receive completion (wr_id 0x%" PRIX64 ", byte_len %" PRIu32 ")",
				(uint64_t)wc.wr_id, wc.byte_len);
			failed = 1;
			break;
		}
		size_t slot = at / MSG_SIZE;
		if (recv[slot] == I_M_DONE) {
			done++;
			continue;
		}
		printf("[server] value received: %" PRIu64 " from the connection [qp#%d]\n", recv[slot],
			(int)qps[index]);
		uint64_t value = recv[slot];
		TRY(rpma_srq_recv(srq, recv_mr, slot * MSG_SIZE, MSG_SIZE, recv + slot));
		/*
		 * The answer goes from the connection's own send slot, not the
		 * receive slot's: any client's next message may land in this
		 * receive slot while the unsignaled send below is still being
		 * read by the device, and rewriting its source then would hand
		 * this client another client's answer. A client sends again
		 * only after its answer arrived, so its own slot is free then.
		 */
		send[index] = value + 1;
		printf("[server] value sent: %" PRIu64 " from the connection [qp#%d]\n", send[index],
			(int)qps[index]);
		TRY(rpma_send(conns[index], send_mr, (size_t)index * MSG_SIZE, MSG_SIZE,
			RPMA_F_COMPLETION_ON_ERROR, NULL));
	}
	if (done != num_clients) {
		fprintf(stderr, "Unable to receive data from all connections\n");
		failed = 1;
	}
end:
	for (int i = 0; i < CLIENT_MAX; i++)
		if (conns[i])
			failed |= drop_conn(conns[i]) ? 1 : 0;
	return failed ? -1 : 0;
}

/* ---------------------------------------------------------------- */
/* 09-flush-to-persistent-GPSPM, 09scch: protobuf fixed64 messages     */

static void le64_put(uint8_t *b, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		b[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t le64_get(const uint8_t *b)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | b[i];
	return v;
}

/* Encodes fields 1..n, each "required fixed64", in field order. */
static size_t pb_encode(uint8_t *b, const uint64_t *vals, int n)
{
	size_t at = 0;
	for (int f = 1; f <= n; f++) {
		b[at++] = (uint8_t)(f << 3 | 1);
		le64_put(b + at, vals[f - 1]);
		at += 8;
	}
	return at;
}

static int pb_varint(const uint8_t *b, size_t len, size_t *at, uint64_t *v)
{
	*v = 0;
	for (int shift = 0; shift < 64; shift += 7) {
		if (*at >= len)
			return -1;
		uint8_t byte = b[(*at)++];
		*v |= (uint64_t)(byte & 0x7f) << shift;
		if (!(byte & 0x80))
			return 0;
	}
	return -1;
}

/*
 * Decodes a message whose fields 1..n are "required fixed64" (wire type 1)
 * into vals; other fields are skipped; fails when a field is malformed,
 * truncated, of another wire type, or missing.
 */
static int pb_decode(const uint8_t *b, size_t len, uint64_t *vals, int n)
{
	unsigned seen = 0;
	size_t at = 0;
	while (at < len) {
		uint64_t key, v;
		if (pb_varint(b, len, &at, &key))
			return -1;
		uint64_t field = key >> 3;
		unsigned wt = key & 7;
		if (field == 0)
			return -1;
		bool ours = field <= (uint64_t)n;
		switch (wt) {
		case 0:
			if (ours || pb_varint(b, len, &at, &v))
				return -1;
			break;
		case 1:
			if (len - at < 8)
				return -1;
			if (ours) {
				vals[field - 1] = le64_get(b + at);
				seen |= 1u << (field - 1);
			}
			at += 8;
			break;
		case 2:
			if (ours || pb_varint(b, len, &at, &v) || v > len - at)
				return -1;
			at += v;
			break;
		case 5:
			if (ours || len - at < 4)
				return -1;
			at += 4;
			break;
		default:
			return -1;
		}
	}
	return seen == (1u << n) - 1 ? 0 : -1;
}

static int gpspm_server(int argc, char **argv, bool scch)
{
	struct common_data cd;
	struct cqs q;
	struct ibv_wc wc;
	uint64_t req[3];
	if (dram_only(argc, argv))
		return -1;
	char *mem = alloc_mem(HELLO_STR_SIZE);
	uint8_t *msg = mem ? alloc_mem(HELLO_STR_SIZE) : NULL;
	if (msg == NULL)
		return -1;
	if (mem[0] != '\0')
		printf("Old value: %.*s\n", (int)strnlen(mem, HELLO_STR_SIZE), mem);
	struct rpma_peer *peer = peer_new(true);
	struct rpma_ep *ep = peer ? listen_ep(peer) : NULL;
	struct rpma_mr_local *mr = ep ? mr_reg(peer, mem, HELLO_STR_SIZE, RPMA_MR_USAGE_WRITE_DST |
		RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY) : NULL;
	struct rpma_mr_local *msg_mr = mr ? mr_reg(peer, msg, HELLO_STR_SIZE, RPMA_MR_USAGE_SEND |
		RPMA_MR_USAGE_RECV | RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY) : NULL;
	if (msg_mr == NULL || make_common_data(mr, 0, NULL, &cd))
		return -1;
	struct rpma_conn_cfg *cfg = conn_cfg(1, scch);
	struct rpma_conn_req *r = cfg ? wait_req(ep, cfg) : NULL;
	if (r == NULL)
		return -1;
	TRY(rpma_conn_req_recv(r, msg_mr, GPSPM_RECV_OFFSET, GPSPM_MSG_SIZE_MAX, NULL));
	struct rpma_conn *conn = accept_req(r, &cd, sizeof(cd));
	if (conn == NULL || cqs_of(conn, true, scch, &q))
		return -1;
	if (wait_op(&q, IBV_WC_RECV, "rpma_recv()", &wc))
		return -1;
	if (wc.byte_len > GPSPM_MSG_SIZE_MAX ||
			pb_decode(msg + GPSPM_RECV_OFFSET, wc.byte_len, req, 3)) {
		fprintf(stderr, "Cannot unpack the flush request buffer\n");
		return -1;
	}
	printf("Flush request received: {offset: 0x%" PRIX64 ", length: 0x%" PRIX64
		", op_context: 0x%" PRIX64 "}\n", req[0], req[1], req[2]);
	printf("At this point, %s function should be called if persistent memory will be in use\n",
		scch ? "persistent" : "persist");
	size_t size = pb_encode(msg + GPSPM_SEND_OFFSET, &req[2], 1);
	TRY(rpma_send(conn, msg_mr, GPSPM_SEND_OFFSET, size, RPMA_F_COMPLETION_ALWAYS, NULL));
	if (wait_op(&q, IBV_WC_SEND, "rpma_send()", &wc) || close_second(conn))
		return -1;
	printf("New value: %.*s\n", (int)strnlen(mem, HELLO_STR_SIZE), mem);
	return 0;
}

static int gpspm_client(int argc, char **argv, bool scch)
{
	struct common_data cd;
	struct cqs q;
	struct ibv_wc wc;
	uint64_t resp;
	bool got_send = false, got_recv = false;
	if (dram_only(argc, argv))
		return -1;
	char *hello = new_hello();
	if (hello == NULL)
		return -1;
	printf("Next value: %s\n", hello + HELLO_STR_OFFSET);
	uint8_t *msg = alloc_mem(HELLO_STR_SIZE);
	struct rpma_peer *peer = msg ? peer_new(false) : NULL;
	struct rpma_conn_cfg *cfg = peer ? conn_cfg(1, scch) : NULL;
	struct rpma_conn *conn = cfg ? client_connect(peer, cfg, NULL, 0) : NULL;
	struct rpma_mr_local *src = conn ? mr_reg(peer, hello, HELLO_T_SIZE, RPMA_MR_USAGE_WRITE_SRC) : NULL;
	struct rpma_mr_local *msg_mr = src ? mr_reg(peer, msg, HELLO_STR_SIZE, RPMA_MR_USAGE_SEND |
		RPMA_MR_USAGE_RECV) : NULL;
	if (msg_mr == NULL || get_common_data(conn, &cd))
		return -1;
	struct rpma_mr_remote *dst = remote_mr(&cd);
	if (dst == NULL || check_room(dst, cd.data_offset, "Size of the remote memory region is too "
			"small for writing the data of the assumed size (%zu < %d)\n"))
		return -1;
	TRY(rpma_write(conn, dst, cd.data_offset, src, HELLO_STR_OFFSET, HELLO_STR_SIZE,
		RPMA_F_COMPLETION_ON_ERROR, NULL));
	TRY(rpma_recv(conn, msg_mr, GPSPM_RECV_OFFSET, GPSPM_MSG_SIZE_MAX, NULL));
	uint64_t req[3] = {cd.data_offset, HELLO_STR_SIZE, FLUSH_ID};
	size_t size = pb_encode(msg + GPSPM_SEND_OFFSET, req, 3);
	TRY(rpma_send(conn, msg_mr, GPSPM_SEND_OFFSET, size, RPMA_F_COMPLETION_ALWAYS, NULL));
	if (cqs_of(conn, true, scch, &q))
		return -1;
	while (!got_send || !got_recv) {
		if (next_wc(&q, &wc))
			return -1;
		const char *func = wc.opcode == IBV_WC_SEND ? "rpma_send()" : "rpma_recv()";
		if (wc.status != IBV_WC_SUCCESS) {
			fprintf(stderr, "%s failed: %s\n", func, ibv_wc_status_str(wc.status));
			return -1;
		}
		if (wc.opcode == IBV_WC_SEND) {
			got_send = true;
		} else if (wc.opcode == IBV_WC_RECV) {
			got_recv = true;
			if (wc.byte_len > GPSPM_MSG_SIZE_MAX ||
					pb_decode(msg + GPSPM_RECV_OFFSET, wc.byte_len, &resp, 1)) {
				fprintf(stderr, "Cannot unpack the flush response buffer\n");
				return -1;
			}
		} else {
			fprintf(stderr, "unexpected wc.opcode value (0x%X)\n", (unsigned)wc.opcode);
			return -1;
		}
	}
	if (resp != FLUSH_ID) {
		fprintf(stderr, "unexpected flush_resp->op_context value (0x%" PRIX64 " != 0x%llX)\n",
			resp, FLUSH_ID);
		return -1;
	}
	translate(hello);
	printf("Translation: %s\n", hello + HELLO_STR_OFFSET);
	return close_first(conn);
}

static int ex09_server(int argc, char **argv) { return gpspm_server(argc, argv, false); }
static int ex09_client(int argc, char **argv) { return gpspm_client(argc, argv, false); }
static int ex09scch_server(int argc, char **argv) { return gpspm_server(argc, argv, true); }
static int ex09scch_client(int argc, char **argv) { return gpspm_client(argc, argv, true); }

/* ---------------------------------------------------------------- */
/* 10-send-with-imm                                                   */

static int ex10_server(int argc, char **argv)
{
	struct rpma_conn_private_data pd;
	struct cqs q;
	struct ibv_wc wc;
	uint32_t expected;
	struct rpma_peer *peer = peer_new(true);
	char *recv = peer ? alloc_mem(KILOBYTE) : NULL;
	struct rpma_mr_local *mr = recv ? mr_reg(peer, recv, KILOBYTE, RPMA_MR_USAGE_RECV) : NULL;
	struct rpma_ep *ep = mr ? listen_ep(peer) : NULL;
	struct rpma_conn_req *req = ep ? wait_req(ep, NULL) : NULL;
	if (req == NULL)
		return -1;
	TRY(rpma_conn_req_recv(req, mr, 0, KILOBYTE, NULL));
	struct rpma_conn *conn = accept_req(req, NULL, 0);
	if (conn == NULL)
		return -1;
	TRY(rpma_conn_get_private_data(conn, &pd));
	if (pd.ptr == NULL || pd.len < sizeof(uint32_t)) {
		fprintf(stderr, "Received connection's private data is too small (%u < %zu)\n",
			pd.ptr ? (unsigned)pd.len : 0, sizeof(uint32_t));
		return -1;
	}
	memcpy(&expected, pd.ptr, sizeof(expected));
	if (cqs_of(conn, false, false, &q) || next_wc(&q, &wc))
		return -1;
	if (wc.status != IBV_WC_SUCCESS) {
		fprintf(stderr, "Received unexpected completion: %s\n", ibv_wc_status_str(wc.status));
		return -1;
	}
	if (wc.opcode != IBV_WC_RECV) {
		fprintf(stderr, "Received unexpected type of operation (%d != %d)\n", (int)wc.opcode,
			(int)IBV_WC_RECV);
		return -1;
	}
	if (!(wc.wc_flags & IBV_WC_WITH_IMM)) {
		fprintf(stderr, "Received unexpected completion flag (no IBV_WC_WITH_IMM)\n");
		return -1;
	}
	uint32_t imm = ntohl(wc.imm_data);
	if (imm != expected) {
		fprintf(stderr, "Received unexpected immediate data (%u != %u)\n", imm, expected);
		return -1;
	}
	size_t len = wc.byte_len < KILOBYTE ? wc.byte_len : KILOBYTE;
	printf("Received value '%.*s' with immediate data '%u'\n", (int)strnlen(recv, len), recv, imm);
	return close_second(conn);
}

static int ex10_client(int argc, char **argv)
{
	struct cqs q;
	struct ibv_wc wc;
	uint64_t imm;
	if (argc < 1) {
		fprintf(stderr, "usage: example_peer 10 client <addr> <port> <imm> [word]\n");
		return -1;
	}
	if (parse_u64(argv[0], &imm))
		return -1;
	if (imm > UINT32_MAX) {
		fprintf(stderr, "The provided immediate data is too big (%" PRIu64 " > %u)\n", imm,
			UINT32_MAX);
		return -1;
	}
	const char *word = argc >= 2 ? argv[1] : NULL;
	uint32_t imm32 = (uint32_t)imm;
	struct rpma_peer *peer = peer_new(false);
	if (peer == NULL)
		return -1;
	char *send = NULL;
	struct rpma_mr_local *mr = NULL;
	if (word) {
		send = alloc_mem(KILOBYTE);
		if (send == NULL || (mr = mr_reg(peer, send, KILOBYTE, RPMA_MR_USAGE_SEND)) == NULL)
			return -1;
	}
	struct rpma_conn *conn = client_connect(peer, NULL, &imm32, sizeof(imm32));
	if (conn == NULL)
		return -1;
	if (word) {
		printf("Sending value '%s' with immediate data '%u'\n", word, imm32);
		strncpy(send, word, KILOBYTE - 1);
	} else {
		printf("Sending immediate data '%u'\n", imm32);
	}
	TRY(rpma_send_with_imm(conn, mr, 0, word ? KILOBYTE : 0, RPMA_F_COMPLETION_ALWAYS, imm32,
		NULL));
	if (cqs_of(conn, false, false, &q) || next_wc(&q, &wc))
		return -1;
	if (wc.status != IBV_WC_SUCCESS) {
		fprintf(stderr, "Received unexpected completion: %s\n", ibv_wc_status_str(wc.status));
		return -1;
	}
	if (wc.opcode != IBV_WC_SEND) {
		fprintf(stderr, "Received unexpected type of operation (%d != %d)\n", (int)wc.opcode,
			(int)IBV_WC_SEND);
		return -1;
	}
	return close_first(conn);
}

/* ---------------------------------------------------------------- */
/* 11-write-with-imm                                                  */

static int ex11_server(int argc, char **argv)
{
	struct common_data cd;
	struct cqs q;
	struct ibv_wc wc;
	uint32_t expected;
	struct rpma_peer *peer = peer_new(true);
	char *dst = peer ? alloc_mem(KILOBYTE) : NULL;
	char *recv = dst ? alloc_mem(1) : NULL;
	struct rpma_mr_local *dst_mr = recv ? mr_reg(peer, dst, KILOBYTE, RPMA_MR_USAGE_WRITE_DST) : NULL;
	struct rpma_mr_local *recv_mr = dst_mr ? mr_reg(peer, recv, 1, RPMA_MR_USAGE_RECV) : NULL;
	if (recv_mr == NULL || make_common_data(dst_mr, 0, NULL, &cd))
		return -1;
	struct rpma_ep *ep = listen_ep(peer);
	struct rpma_conn_req *req = ep ? wait_req(ep, NULL) : NULL;
	if (req == NULL)
		return -1;
	TRY(rpma_conn_req_recv(req, recv_mr, 0, 1, NULL));
	struct rpma_conn *conn = accept_req(req, &cd, sizeof(cd));
	if (conn == NULL || cqs_of(conn, false, false, &q) || next_wc(&q, &wc))
		return -1;
	if (wc.status != IBV_WC_SUCCESS) {
		fprintf(stderr, "Received unexpected completion: %s\n", ibv_wc_status_str(wc.status));
		return -1;
	}
	if (wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM) {
		fprintf(stderr, "Received unexpected type of operation (%d != %d)\n", (int)wc.opcode,
			(int)IBV_WC_RECV_RDMA_WITH_IMM);
		return -1;
	}
	if (!(wc.wc_flags & IBV_WC_WITH_IMM)) {
		fprintf(stderr, "Received an unexpected completion flag (no IBV_WC_WITH_IMM)\n");
		return -1;
	}
	memcpy(&expected, dst, sizeof(expected));
	uint32_t imm = ntohl(wc.imm_data);
	if (imm != expected) {
		fprintf(stderr, "Received unexpected immediate data (%u != %u)\n", imm, expected);
		return -1;
	}
	printf("The value '%u' was written together with immediate data '%u'\n", expected, imm);
	return close_second(conn);
}

static int ex11_client(int argc, char **argv)
{
	struct rpma_conn_private_data pd;
	struct common_data cd;
	struct cqs q;
	struct ibv_wc wc;
	uint64_t imm;
	if (argc < 1) {
		fprintf(stderr, "usage: example_peer 11 client <addr> <port> <imm>\n");
		return -1;
	}
	if (parse_u64(argv[0], &imm))
		return -1;
	if (imm > UINT32_MAX) {
		fprintf(stderr, "The provided immediate data is too big (%" PRIu64 " > %u)\n", imm,
			UINT32_MAX);
		return -1;
	}
	uint32_t imm32 = (uint32_t)imm;
	struct rpma_peer *peer = peer_new(false);
	char *src = peer ? alloc_mem(KILOBYTE) : NULL;
	struct rpma_mr_local *mr = src ? mr_reg(peer, src, KILOBYTE, RPMA_MR_USAGE_WRITE_SRC) : NULL;
	struct rpma_conn *conn = mr ? client_connect(peer, NULL, NULL, 0) : NULL;
	if (conn == NULL)
		return -1;
	TRY(rpma_conn_get_private_data(conn, &pd));
	if (pd.ptr == NULL || pd.len < COMMON_DATA_SIZE) {
		fprintf(stderr, "Received connection's private data is too small (%u < %d)\n",
			pd.ptr ? (unsigned)pd.len : 0, COMMON_DATA_SIZE);
		return -1;
	}
	if (get_common_data(conn, &cd))
		return -1;
	struct rpma_mr_remote *dst = remote_mr(&cd);
	if (dst == NULL)
		return -1;
	memcpy(src, &imm32, sizeof(imm32));
	printf("Writing value '%u' with immediate data '%u'\n", imm32, imm32);
	TRY(rpma_write_with_imm(conn, dst, cd.data_offset, mr, 0, KILOBYTE, RPMA_F_COMPLETION_ALWAYS,
		imm32, NULL));
	if (cqs_of(conn, false, false, &q) || next_wc(&q, &wc))
		return -1;
	if (wc.status != IBV_WC_SUCCESS) {
		fprintf(stderr, "Received unexpected completion: %s\n", ibv_wc_status_str(wc.status));
		return -1;
	}
	if (wc.opcode != IBV_WC_RDMA_WRITE) {
		fprintf(stderr, "Received unexpected type of operation (%d != %d)\n", (int)wc.opcode,
			(int)IBV_WC_RDMA_WRITE);
		return -1;
	}
	return close_first(conn);
}

/* ---------------------------------------------------------------- */

struct example {
	const char *name;
	int (*server)(int argc, char **argv);
	int (*client)(int argc, char **argv);
};

static const struct example Examples[] = {
	{"01", ex01_server, ex01_client},
	{"02", ex02_server, ex02_client},
	{"03", ex03_server, ex03_client},
	{"04", ex04_server, ex04_client},
	{"05", ex05_server, ex05_client},
	{"06", ex06_server, ex06_client},
	{"06scch", ex06scch_server, ex06_client},
	{"07", ex07_server, ex07_client},
	{"08", ex08_server, ex08_client},
	{"08srq", ex08srq_server, ex08srq_client},
	{"09", ex09_server, ex09_client},
	{"09scch", ex09scch_server, ex09scch_client},
	{"10", ex10_server, ex10_client},
	{"11", ex11_server, ex11_client},
	{"12", ex12_server, ex12_client},
	{"12scch", ex12scch_server, ex12scch_client},
	{"13", ex13_server, ex13_client},
};

static void on_alarm(int sig)
{
	static const char msg[] = "example_peer: error: timed out (EXAMPLE_PEER_TIMEOUT)\n";
	(void) sig;
	(void) !write(STDERR_FILENO, msg, sizeof(msg) - 1);
	_exit(1);
}

static int usage(void)
{
	fprintf(stderr, "usage: example_peer EXAMPLE server|client ADDR PORT [ARGS...]\n"
		"EXAMPLE:");
	for (size_t i = 0; i < sizeof(Examples) / sizeof(Examples[0]); i++)
		fprintf(stderr, " %s", Examples[i].name);
	fprintf(stderr, "\n");
	return 2;
}

int main(int argc, char *argv[])
{
	if (argc < 5)
		return usage();
	const struct example *ex = NULL;
	for (size_t i = 0; i < sizeof(Examples) / sizeof(Examples[0]); i++)
		if (!strcmp(argv[1], Examples[i].name))
			ex = &Examples[i];
	bool server = !strcmp(argv[2], "server");
	if (ex == NULL || (!server && strcmp(argv[2], "client")))
		return usage();
	Addr = argv[3];
	Port = argv[4];

	unsigned timeout = 120;
	const char *t = getenv("EXAMPLE_PEER_TIMEOUT");
	if (t && atoi(t) > 0)
		timeout = (unsigned)atoi(t);
	const char *w = getenv("EXAMPLE_PEER_WAIT_MS");
	if (w && atoi(w) > 0)
		WAIT_MS = atoi(w);
	signal(SIGALRM, on_alarm);
	alarm(timeout);
	setvbuf(stdout, NULL, _IOLBF, 0);

	/* as librpma's examples: librpma's log at INFO on both outputs */
	rpma_log_set_threshold(RPMA_LOG_THRESHOLD, RPMA_LOG_LEVEL_INFO);
	rpma_log_set_threshold(RPMA_LOG_THRESHOLD_AUX, RPMA_LOG_LEVEL_INFO);

	int ret = (server ? ex->server : ex->client)(argc - 5, argv + 5);
	ret |= release_all();
	fflush(stdout);
	return ret ? 1 : 0;
}
