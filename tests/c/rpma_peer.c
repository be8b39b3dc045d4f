/*
 * rpma_peer: a C librpma peer for rpma's interop tests, speaking the demo's
 * conventions (the `common_data` private-data layout of librpma's examples).
 *
 *   rpma_peer server ADDR PORT  exposes a greeting (READ_SRC | WRITE_DST |
 *                               FLUSH_TYPE_VISIBILITY, 4 KiB); after the
 *                               client closes, prints what it wrote at 1024.
 *   rpma_peer client ADDR PORT  reads the server's greeting, writes a reply
 *                               at 1024 and flushes it, then disconnects.
 *
 * Built by tests/device_interop.rs with gcc against Debian's librpma-dev.
 */
#include <librpma.h>
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
#define REPLY_AT 1024

#define CHECK(call) do { int r_ = (call); if (r_) { \
	fprintf(stderr, "%s failed: %s\n", #call, rpma_err_2str(r_)); exit(1); } } while (0)

static void expect(struct rpma_conn *conn, enum rpma_conn_event want)
{
	enum rpma_conn_event ev;
	CHECK(rpma_conn_next_event(conn, &ev));
	if (ev != want) {
		fprintf(stderr, "got event %s, wanted %s\n", rpma_utils_conn_event_2str(ev),
			rpma_utils_conn_event_2str(want));
		exit(1);
	}
}

static void wait_one(struct rpma_conn *conn)
{
	struct rpma_cq *cq;
	struct ibv_wc wc;
	int n = 0;
	CHECK(rpma_conn_get_cq(conn, &cq));
	while (n == 0) {
		CHECK(rpma_cq_wait(cq));
		int r = rpma_cq_get_wc(cq, 1, &wc, &n);
		if (r == RPMA_E_NO_COMPLETION)
			continue;
		CHECK(r);
	}
	if (wc.status != IBV_WC_SUCCESS) {
		fprintf(stderr, "completion failed: %s\n", ibv_wc_status_str(wc.status));
		exit(1);
	}
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
	char *buf = aligned_alloc(4096, SIZE);
	memset(buf, 0, SIZE);
	strcpy(buf, "Hello from the C librpma server!");
	struct rpma_mr_local *mr;
	CHECK(rpma_mr_reg(peer, buf, SIZE, RPMA_MR_USAGE_READ_SRC | RPMA_MR_USAGE_WRITE_DST |
		RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY, &mr));
	struct common_data data = {0};
	size_t desc_size;
	CHECK(rpma_mr_get_descriptor_size(mr, &desc_size));
	data.mr_desc_size = (uint8_t)desc_size;
	CHECK(rpma_mr_get_descriptor(mr, &data.descriptors[0]));
	struct rpma_conn_private_data pdata = {&data, sizeof(data)};

	struct rpma_ep *ep;
	struct rpma_conn_req *req;
	struct rpma_conn *conn;
	CHECK(rpma_ep_listen(peer, addr, port, &ep));
	printf("c-server: listening\n");
	fflush(stdout);
	CHECK(rpma_ep_next_conn_req(ep, NULL, &req));
	CHECK(rpma_conn_req_connect(&req, &pdata, &conn));
	expect(conn, RPMA_CONN_ESTABLISHED);
	expect(conn, RPMA_CONN_CLOSED);
	CHECK(rpma_conn_disconnect(conn));
	CHECK(rpma_conn_delete(&conn));
	printf("c-server: the client wrote: %s\n", buf + REPLY_AT);
	CHECK(rpma_ep_shutdown(&ep));
	CHECK(rpma_mr_dereg(&mr));
	CHECK(rpma_peer_delete(&peer));
	free(buf);
	return 0;
}

static int client(const char *addr, const char *port)
{
	struct rpma_peer *peer = peer_for(addr, RPMA_UTIL_IBV_CONTEXT_REMOTE);
	char *buf = aligned_alloc(4096, SIZE);
	memset(buf, 0, SIZE);
	struct rpma_mr_local *mr;
	CHECK(rpma_mr_reg(peer, buf, SIZE, RPMA_MR_USAGE_READ_DST | RPMA_MR_USAGE_WRITE_SRC, &mr));

	struct rpma_conn_req *req;
	struct rpma_conn *conn;
	CHECK(rpma_conn_req_new(peer, addr, port, NULL, &req));
	CHECK(rpma_conn_req_connect(&req, NULL, &conn));
	expect(conn, RPMA_CONN_ESTABLISHED);

	struct rpma_conn_private_data pdata;
	CHECK(rpma_conn_get_private_data(conn, &pdata));
	if (pdata.len < sizeof(struct common_data)) {
		fprintf(stderr, "private data too short: %u\n", pdata.len);
		return 1;
	}
	struct common_data *data = pdata.ptr;
	struct rpma_mr_remote *rmr;
	CHECK(rpma_mr_remote_from_descriptor(&data->descriptors[0], data->mr_desc_size, &rmr));
	size_t rsize;
	CHECK(rpma_mr_remote_get_size(rmr, &rsize));

	CHECK(rpma_read(conn, mr, 0, rmr, data->data_offset, 64, RPMA_F_COMPLETION_ALWAYS, NULL));
	wait_one(conn);
	printf("c-client: read: %s\n", buf);

	strcpy(buf + 512, "Hello back from the C librpma client!");
	CHECK(rpma_write(conn, rmr, REPLY_AT, mr, 512, strlen(buf + 512) + 1, RPMA_F_COMPLETION_ON_ERROR, NULL));
	CHECK(rpma_flush(conn, rmr, REPLY_AT, strlen(buf + 512) + 1, RPMA_FLUSH_TYPE_VISIBILITY,
		RPMA_F_COMPLETION_ALWAYS, NULL));
	wait_one(conn);
	printf("c-client: wrote and flushed a reply (remote size %zu)\n", rsize);

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
	if (argc != 4) {
		fprintf(stderr, "usage: %s server|client ADDR PORT\n", argv[0]);
		return 2;
	}
	if (strcmp(argv[1], "server") == 0)
		return server(argv[2], argv[3]);
	if (strcmp(argv[1], "client") == 0)
		return client(argv[2], argv[3]);
	fprintf(stderr, "unknown role %s\n", argv[1]);
	return 2;
}
