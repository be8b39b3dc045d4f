/*
 * usage_table: every usage of the local and of the remote region against
 * every operation, on one device, in one process (the client and the server
 * of each connection are both here). For each case it prints the
 * operation's return code and, when it was posted, the completion's status
 * (and a send's receive status): the line is what a C program sees. It is
 * run on C librpma and on rpma's library (LD_LIBRARY_PATH), and the two
 * outputs must be the same (tests/device_capi.rs).
 *
 *   usage_table ADDR PORT
 *
 * Each case gets its own connection, since a refused operation moves the
 * queue pair to the error state.
 */
#include <librpma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                  \
	do {                                                                         \
		int rc_ = (call);                                                    \
		if (rc_) {                                                           \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, \
				rpma_err_2str(rc_));                                 \
			exit(1);                                                     \
		}                                                                    \
	} while (0)

static const struct {
	const char *name;
	int usage;
} usages[] = {
	{ "READ_SRC", RPMA_MR_USAGE_READ_SRC },
	{ "READ_DST", RPMA_MR_USAGE_READ_DST },
	{ "WRITE_SRC", RPMA_MR_USAGE_WRITE_SRC },
	{ "WRITE_DST", RPMA_MR_USAGE_WRITE_DST },
	{ "FLUSH_VIS", RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY },
	{ "FLUSH_PERS", RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT },
	{ "SEND", RPMA_MR_USAGE_SEND },
	{ "RECV", RPMA_MR_USAGE_RECV },
};
#define N_USAGES (sizeof(usages) / sizeof(usages[0]))
/* Every usage but persistent flush (which the device may refuse on DRAM). */
#define ALL (0xff & ~RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT)

enum op { READ, WRITE, SEND_RECV, ATOMIC_WRITE, FLUSH_VIS, N_OPS };
static const char *op_names[] = { "read", "write", "send/recv", "atomic_write", "flush(visibility)" };

static const char *addr, *port;
static struct rpma_peer *peer;
static struct rpma_ep *ep;

/* The completion of the one operation posted on `conn`: its status. */
static int status_of(struct rpma_conn *conn)
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
	return wc.status;
}

static void one(enum op op, int local_usage, int remote_usage, const char *what)
{
	static char lbuf[4096] __attribute__((aligned(4096)));
	static char rbuf[4096] __attribute__((aligned(4096)));
	struct rpma_mr_local *local, *remote_mr;
	struct rpma_mr_remote *remote;
	char desc[64];
	size_t desc_size;
	/* A usage the device cannot grant (persistent flush on DRAM where
	 * flush is native) is an outcome too. */
	int reg = rpma_mr_reg(peer, lbuf, sizeof(lbuf), local_usage, &local);
	if (reg) {
		printf("%-18s %-22s reg local rc %d\n", op_names[op], what, reg);
		return;
	}
	reg = rpma_mr_reg(peer, rbuf, sizeof(rbuf), remote_usage, &remote_mr);
	if (reg) {
		printf("%-18s %-22s reg remote rc %d\n", op_names[op], what, reg);
		CHECK(rpma_mr_dereg(&local));
		return;
	}
	CHECK(rpma_mr_get_descriptor_size(remote_mr, &desc_size));
	CHECK(rpma_mr_get_descriptor(remote_mr, desc));
	CHECK(rpma_mr_remote_from_descriptor(desc, desc_size, &remote));

	struct rpma_conn_req *req, *sreq;
	struct rpma_conn *conn, *sconn;
	enum rpma_conn_event ev;
	CHECK(rpma_conn_req_new(peer, addr, port, NULL, &req));
	CHECK(rpma_conn_req_connect(&req, NULL, &conn));
	CHECK(rpma_ep_next_conn_req(ep, NULL, &sreq));
	/* The server receives into its region (for the send). */
	int recv_rc = op == SEND_RECV ? rpma_conn_req_recv(sreq, remote_mr, 0, 8, NULL) : 0;
	CHECK(rpma_conn_req_connect(&sreq, NULL, &sconn));
	CHECK(rpma_conn_next_event(conn, &ev));
	CHECK(rpma_conn_next_event(sconn, &ev));

	int rc;
	char value[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	switch (op) {
	case READ:
		rc = rpma_read(conn, local, 0, remote, 0, 8, RPMA_F_COMPLETION_ALWAYS, NULL);
		break;
	case WRITE:
		rc = rpma_write(conn, remote, 0, local, 0, 8, RPMA_F_COMPLETION_ALWAYS, NULL);
		break;
	case SEND_RECV:
		rc = rpma_send(conn, local, 0, 8, RPMA_F_COMPLETION_ALWAYS, NULL);
		break;
	case ATOMIC_WRITE:
		rc = rpma_atomic_write(conn, remote, 0, value, RPMA_F_COMPLETION_ALWAYS, NULL);
		break;
	default:
		rc = rpma_flush(conn, remote, 0, 8, RPMA_FLUSH_TYPE_VISIBILITY, RPMA_F_COMPLETION_ALWAYS, NULL);
		break;
	}
	printf("%-18s %-22s rc %d", op_names[op], what, rc);
	if (rc == 0)
		printf(" status %d", status_of(conn));
	if (op == SEND_RECV) {
		printf(" recv rc %d", recv_rc);
		if (recv_rc == 0)
			printf(" status %d", status_of(sconn));
	}
	printf("\n");
	fflush(stdout);

	CHECK(rpma_conn_disconnect(conn));
	CHECK(rpma_conn_next_event(sconn, &ev));
	CHECK(rpma_conn_disconnect(sconn));
	CHECK(rpma_conn_next_event(conn, &ev));
	CHECK(rpma_conn_delete(&conn));
	CHECK(rpma_conn_delete(&sconn));
	CHECK(rpma_mr_remote_delete(&remote));
	CHECK(rpma_mr_dereg(&remote_mr));
	CHECK(rpma_mr_dereg(&local));
}

int main(int argc, char *argv[])
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s ADDR PORT\n", argv[0]);
		return 2;
	}
	addr = argv[1];
	port = argv[2];
	struct ibv_context *ctx;
	CHECK(rpma_utils_get_ibv_context(addr, RPMA_UTIL_IBV_CONTEXT_LOCAL, &ctx));
	CHECK(rpma_peer_new(ctx, &peer));
	CHECK(rpma_ep_listen(peer, addr, port, &ep));
	char what[64];
	for (int op = 0; op < N_OPS; op++) {
		/* The local region with one usage, the remote one with all. */
		for (size_t u = 0; u < N_USAGES; u++) {
			snprintf(what, sizeof(what), "local %s", usages[u].name);
			one(op, usages[u].usage, ALL, what);
		}
		/* The remote region with one usage, the local one with all. */
		for (size_t u = 0; u < N_USAGES; u++) {
			snprintf(what, sizeof(what), "remote %s", usages[u].name);
			one(op, ALL, usages[u].usage, what);
		}
	}
	CHECK(rpma_ep_shutdown(&ep));
	CHECK(rpma_peer_delete(&peer));
	return 0;
}
