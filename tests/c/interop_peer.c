/*
 * interop_peer: the C librpma side of rpma's interop matrix (its Rust twin is
 * examples/interop-peer.rs; both follow the same conventions).
 *
 *   interop_peer server ADDR PORT
 *       exposes 4 KiB (READ_SRC | WRITE_DST | FLUSH_TYPE_VISIBILITY |
 *       FLUSH_TYPE_PERSISTENT) holding "Hello from C server!" at 0, sends
 *       common_data {mr descriptor, peer cfg with direct_write_to_pmem on},
 *       pre-posts one 64-byte receive; after the client closes, prints what
 *       arrived: the string at 1024 and 2048, the u64 at 4088, the receive.
 *   interop_peer client ADDR PORT CASE
 *       CASE: read | write-flush-vis | write-flush-pers | atomic | send |
 *       send-imm | write-imm | contexts (op contexts of every width come
 *       back whole, past the send queue's size; a region deregistered
 *       while its read may be in flight)
 *
 * The contracts of librpma's own examples are in example_peer.c.
 */
#include <librpma.h>
#include <arpa/inet.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct common_data {
	uint16_t data_offset;
	uint8_t mr_desc_size;
	uint8_t pcfg_desc_size;
	char descriptors[24];
};

#define SIZE 4096
#define CHECK(call) do { int r_ = (call); if (r_) { \
	fprintf(stderr, "%s failed: %s\n", #call, rpma_err_2str(r_)); exit(1); } } while (0)

static void expect(struct rpma_conn *conn, enum rpma_conn_event want)
{
	enum rpma_conn_event ev;
	CHECK(rpma_conn_next_event(conn, &ev));
	if (ev != want) {
		fprintf(stderr, "event %s, wanted %s\n", rpma_utils_conn_event_2str(ev),
			rpma_utils_conn_event_2str(want));
		exit(1);
	}
}

/* Waits for the next completion of `cq`, into `wc`. */
static void next_wc(struct rpma_cq *cq, struct ibv_wc *wc)
{
	int n = 0;
	while (n == 0) {
		CHECK(rpma_cq_wait(cq));
		int r = rpma_cq_get_wc(cq, 1, wc, &n);
		if (r == RPMA_E_NO_COMPLETION)
			continue;
		CHECK(r);
	}
}

static void wait_one(struct rpma_conn *conn)
{
	struct rpma_cq *cq;
	struct ibv_wc wc;
	CHECK(rpma_conn_get_cq(conn, &cq));
	next_wc(cq, &wc);
	if (wc.status != IBV_WC_SUCCESS) {
		fprintf(stderr, "completion failed: %s\n", ibv_wc_status_str(wc.status));
		exit(1);
	}
}

/* Waits for the next completion; fails unless it is a successful `op`
 * carrying `ctx`. */
static void wait_ctx(struct rpma_cq *cq, enum ibv_wc_opcode op, uint64_t ctx)
{
	struct ibv_wc wc;
	next_wc(cq, &wc);
	if (wc.status != IBV_WC_SUCCESS || wc.opcode != op || wc.wr_id != ctx) {
		fprintf(stderr, "completion %s opcode %d wr_id %#" PRIx64 ", wanted opcode %d wr_id %#" PRIx64 "\n",
			ibv_wc_status_str(wc.status), wc.opcode, (uint64_t)wc.wr_id, op, ctx);
		exit(1);
	}
}

/* The contexts case: every op context comes back whole, whatever its
 * width, with an unsignaled write before each signaled read, for more
 * rounds than a send queue holds; the same through librpma's 0-byte read
 * and write;
 * then a region deregistered right after its read was posted (librpma
 * deregisters it; the read completes or fails, with its context). */
static void contexts(struct rpma_peer *peer, struct rpma_conn *conn, struct rpma_mr_local *mr,
	struct rpma_mr_remote *rmr)
{
	static const uint64_t ctxs[] = {0, 1, 0x7fffffffffffULL, 0xffffffffffffffULL,
		0x100000000000000ULL, 0xfedcba9876543210ULL, UINT64_MAX};
	const int k = sizeof(ctxs) / sizeof(ctxs[0]), rounds = 40;
	struct rpma_cq *cq;
	CHECK(rpma_conn_get_cq(conn, &cq));
	for (int r = 0; r < rounds; r++) {
		for (int i = 0; i < k; i++) {
			/* the unsignaled write carries another width than the read */
			void *w = (void *)(uintptr_t)ctxs[(i + r) % k];
			CHECK(rpma_write(conn, rmr, 1024, mr, 512, 8, RPMA_F_COMPLETION_ON_ERROR, w));
			CHECK(rpma_read(conn, mr, 256, rmr, 1024, 8, RPMA_F_COMPLETION_ALWAYS,
				(void *)(uintptr_t)ctxs[i]));
			wait_ctx(cq, IBV_WC_RDMA_READ, ctxs[i]);
		}
	}
	printf("contexts: %d reads, each context back whole\n", rounds * k);
	for (int i = 0; i < k; i++) {
		CHECK(rpma_read(conn, NULL, 0, NULL, 0, 0, RPMA_F_COMPLETION_ALWAYS, (void *)(uintptr_t)ctxs[i]));
		wait_ctx(cq, IBV_WC_RDMA_READ, ctxs[i]);
		CHECK(rpma_write(conn, NULL, 0, NULL, 0, 0, RPMA_F_COMPLETION_ALWAYS, (void *)(uintptr_t)ctxs[i]));
		wait_ctx(cq, IBV_WC_RDMA_WRITE, ctxs[i]);
	}
	printf("contexts: %d zero-byte reads and writes, each context back whole\n", k);
	char *buf = aligned_alloc(4096, 4096);
	struct rpma_mr_local *early;
	CHECK(rpma_mr_reg(peer, buf, 4096, RPMA_MR_USAGE_READ_DST, &early));
	CHECK(rpma_read(conn, early, 0, rmr, 1024, 8, RPMA_F_COMPLETION_ALWAYS, (void *)0x42));
	int ret = rpma_mr_dereg(&early);
	printf("contexts: deregistering a region right after its read: %d\n", ret);
	struct ibv_wc wc;
	next_wc(cq, &wc);
	/* its status depends on when the device got to it */
	printf("contexts: the read's completion carries %#" PRIx64 "\n", (uint64_t)wc.wr_id);
	if (ret)
		CHECK(rpma_mr_dereg(&early));
	free(buf);
}

static struct rpma_peer *peer_for(const char *addr, enum rpma_util_ibv_context_type t)
{
	struct ibv_context *ctx;
	struct rpma_peer *peer;
	CHECK(rpma_utils_get_ibv_context(addr, t, &ctx));
	CHECK(rpma_peer_new(ctx, &peer));
	return peer;
}

static int server(const char *addr, const char *port)
{
	struct rpma_peer *peer = peer_for(addr, RPMA_UTIL_IBV_CONTEXT_LOCAL);
	char *buf = aligned_alloc(4096, SIZE), *rbuf = aligned_alloc(4096, 4096);
	memset(buf, 0, SIZE);
	memset(rbuf, 0, 4096);
	struct rpma_mr_local *mr, *rmr;
	strcpy(buf, "Hello from C server!");
	int usage = RPMA_MR_USAGE_READ_SRC | RPMA_MR_USAGE_WRITE_DST |
		RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY | RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT;
	bool persistent = true;
	if (rpma_mr_reg(peer, buf, SIZE, usage, &mr)) {
		/* With native RDMA FLUSH, Soft-RoCE grants persistent flush only on
		 * persistent memory: offer visibility only, and say so. */
		persistent = false;
		printf("server: persistent flush refused on DRAM: offering visibility flush only\n");
		CHECK(rpma_mr_reg(peer, buf, SIZE, usage & ~RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT, &mr));
	}
	CHECK(rpma_mr_reg(peer, rbuf, 64, RPMA_MR_USAGE_RECV, &rmr));
	struct common_data data = {0};
	size_t ds;
	CHECK(rpma_mr_get_descriptor_size(mr, &ds));
	data.mr_desc_size = (uint8_t)ds;
	CHECK(rpma_mr_get_descriptor(mr, &data.descriptors[0]));
	struct rpma_peer_cfg *pcfg;
	CHECK(rpma_peer_cfg_new(&pcfg));
	CHECK(rpma_peer_cfg_set_direct_write_to_pmem(pcfg, persistent));
	CHECK(rpma_peer_cfg_get_descriptor(pcfg, &data.descriptors[ds]));
	data.pcfg_desc_size = 1;
	struct rpma_conn_private_data pdata = {&data, sizeof(data)};

	struct rpma_ep *ep;
	struct rpma_conn_req *req;
	struct rpma_conn *conn;
	CHECK(rpma_ep_listen(peer, addr, port, &ep));
	CHECK(rpma_ep_next_conn_req(ep, NULL, &req));
	CHECK(rpma_conn_req_recv(req, rmr, 0, 64, NULL));
	CHECK(rpma_conn_req_connect(&req, &pdata, &conn));
	expect(conn, RPMA_CONN_ESTABLISHED);
	expect(conn, RPMA_CONN_CLOSED);
	struct rpma_cq *cq;
	struct ibv_wc wc;
	int n = 0;
	CHECK(rpma_conn_get_cq(conn, &cq));
	if (rpma_cq_get_wc(cq, 1, &wc, &n) == 0 && n == 1 && wc.status == IBV_WC_SUCCESS) {
		printf("recv: len %u msg \"%.*s\"", wc.byte_len, (int)wc.byte_len, rbuf);
		if (wc.wc_flags & IBV_WC_WITH_IMM)
			printf(" imm %u", ntohl(wc.imm_data));
		printf("\n");
	}
	CHECK(rpma_conn_disconnect(conn));
	CHECK(rpma_conn_delete(&conn));
	uint64_t counter;
	memcpy(&counter, buf + 4088, 8);
	printf("at1024: \"%s\"\nat2048: \"%s\"\ncounter: %#" PRIx64 "\n", buf + 1024, buf + 2048, counter);
	CHECK(rpma_ep_shutdown(&ep));
	CHECK(rpma_peer_cfg_delete(&pcfg));
	CHECK(rpma_mr_dereg(&rmr));
	CHECK(rpma_mr_dereg(&mr));
	CHECK(rpma_peer_delete(&peer));
	free(rbuf);
	free(buf);
	return 0;
}

static int client(const char *addr, const char *port, const char *cs)
{
	struct rpma_peer *peer = peer_for(addr, RPMA_UTIL_IBV_CONTEXT_REMOTE);
	char *buf = aligned_alloc(4096, SIZE);
	memset(buf, 0, SIZE);
	struct rpma_mr_local *mr;
	CHECK(rpma_mr_reg(peer, buf, SIZE, RPMA_MR_USAGE_READ_DST | RPMA_MR_USAGE_WRITE_SRC |
		RPMA_MR_USAGE_SEND, &mr));
	struct rpma_conn_req *req;
	struct rpma_conn *conn;
	CHECK(rpma_conn_req_new(peer, addr, port, NULL, &req));
	CHECK(rpma_conn_req_connect(&req, NULL, &conn));
	expect(conn, RPMA_CONN_ESTABLISHED);
	struct rpma_conn_private_data pdata;
	CHECK(rpma_conn_get_private_data(conn, &pdata));
	struct common_data *d = pdata.ptr;
	if (pdata.len < sizeof(*d) || d->mr_desc_size + d->pcfg_desc_size > 24) {
		fprintf(stderr, "bad private data\n");
		return 1;
	}
	struct rpma_mr_remote *rmr;
	CHECK(rpma_mr_remote_from_descriptor(&d->descriptors[0], d->mr_desc_size, &rmr));
	const char *msg = "from the C client";
	strcpy(buf + 512, msg);
	size_t len = strlen(msg) + 1;
	int f = RPMA_F_COMPLETION_ALWAYS;
	if (!strcmp(cs, "read")) {
		CHECK(rpma_read(conn, mr, 0, rmr, d->data_offset, 32, f, NULL));
		wait_one(conn);
		printf("read: \"%s\"\n", buf);
	} else if (!strcmp(cs, "write-flush-vis") || !strcmp(cs, "write-flush-pers")) {
		bool pers = !strcmp(cs, "write-flush-pers");
		if (pers) {
			struct rpma_peer_cfg *pcfg;
			CHECK(rpma_peer_cfg_from_descriptor(&d->descriptors[d->mr_desc_size], d->pcfg_desc_size, &pcfg));
			CHECK(rpma_conn_apply_remote_peer_cfg(conn, pcfg));
			CHECK(rpma_peer_cfg_delete(&pcfg));
			int ft;
			CHECK(rpma_mr_remote_get_flush_type(rmr, &ft));
			if (!(ft & RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT)) {
				/* The server could not offer it: librpma must refuse. */
				int ret = rpma_flush(conn, rmr, 1024, len, RPMA_FLUSH_TYPE_PERSISTENT, f, NULL);
				if (ret != RPMA_E_NOSUPP) {
					fprintf(stderr, "persistent flush without the usage: %s\n", rpma_err_2str(ret));
					return 1;
				}
				printf("client: write-flush-pers refused (NOSUPP): the server offers no persistent flush\n");
				goto done;
			}
		}
		CHECK(rpma_write(conn, rmr, 1024, mr, 512, len, RPMA_F_COMPLETION_ON_ERROR, NULL));
		CHECK(rpma_flush(conn, rmr, 1024, len, pers ? RPMA_FLUSH_TYPE_PERSISTENT : RPMA_FLUSH_TYPE_VISIBILITY, f, NULL));
		wait_one(conn);
	} else if (!strcmp(cs, "atomic")) {
		char v[8];
		uint64_t x = 0x0102030405060708ULL;
		memcpy(v, &x, 8);
		CHECK(rpma_atomic_write(conn, rmr, 4088, v, f, NULL));
		wait_one(conn);
	} else if (!strcmp(cs, "send")) {
		CHECK(rpma_send(conn, mr, 512, len, f, NULL));
		wait_one(conn);
	} else if (!strcmp(cs, "send-imm")) {
		CHECK(rpma_send_with_imm(conn, mr, 512, len, f, 12648430, NULL));
		wait_one(conn);
	} else if (!strcmp(cs, "write-imm")) {
		CHECK(rpma_write_with_imm(conn, rmr, 2048, mr, 512, len, f, 48879, NULL));
		wait_one(conn);
	} else if (!strcmp(cs, "contexts")) {
		contexts(peer, conn, mr, rmr);
	} else {
		fprintf(stderr, "unknown case %s\n", cs);
		return 2;
	}
done:
	printf("client: %s done\n", cs);
	CHECK(rpma_conn_disconnect(conn));
	expect(conn, RPMA_CONN_CLOSED);
	CHECK(rpma_conn_delete(&conn));
	CHECK(rpma_mr_remote_delete(&rmr));
	CHECK(rpma_mr_dereg(&mr));
	CHECK(rpma_peer_delete(&peer));
	free(buf);
	return 0;
}

int main(int argc, char *argv[])
{
	if (argc == 4 && !strcmp(argv[1], "server"))
		return server(argv[2], argv[3]);
	if (argc == 5 && !strcmp(argv[1], "client"))
		return client(argv[2], argv[3], argv[4]);
	fprintf(stderr, "usage: %s server ADDR PORT | client ADDR PORT CASE\n", argv[0]);
	return 2;
}
