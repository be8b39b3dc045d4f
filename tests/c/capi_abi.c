/*
 * capi_abi: librpma's C ABI without a device. Compiled against C librpma's
 * own librpma.h, it takes the address of every function the header declares
 * (so linking fails when one is not exported), checks the sizes of the
 * structs C code allocates, and calls what needs no device: error and event
 * strings, configuration objects, descriptors, logging thresholds, and NULL
 * or invalid arguments. It prints one line per check; tests/capi_abi.rs runs
 * the same binary on C librpma and on rpma's library (LD_LIBRARY_PATH) and
 * compares the lines.
 *
 *   capi_abi            print the checks
 *   capi_abi symbols    print the address-taken function names only
 */
#include <librpma.h>
#include <stdio.h>
#include <string.h>
#include <errno.h>

_Static_assert(sizeof(struct ibv_wc) == 48, "struct ibv_wc");
_Static_assert(sizeof(struct rpma_conn_private_data) == 16, "struct rpma_conn_private_data");
_Static_assert(RPMA_E_NOT_SHARED_CHNL == -100009, "error codes");

#define F(name) { #name, (void (*)(void))name }
static const struct {
	const char *name;
	void (*fn)(void);
} functions[] = {
	F(rpma_atomic_write), F(rpma_conn_apply_remote_peer_cfg), F(rpma_conn_cfg_delete),
	F(rpma_conn_cfg_get_compl_channel), F(rpma_conn_cfg_get_cq_size), F(rpma_conn_cfg_get_rcq_size),
	F(rpma_conn_cfg_get_rq_size), F(rpma_conn_cfg_get_sq_size), F(rpma_conn_cfg_get_srq),
	F(rpma_conn_cfg_get_timeout), F(rpma_conn_cfg_new), F(rpma_conn_cfg_set_compl_channel),
	F(rpma_conn_cfg_set_cq_size), F(rpma_conn_cfg_set_rcq_size), F(rpma_conn_cfg_set_rq_size),
	F(rpma_conn_cfg_set_sq_size), F(rpma_conn_cfg_set_srq), F(rpma_conn_cfg_set_timeout),
	F(rpma_conn_delete), F(rpma_conn_disconnect), F(rpma_conn_get_compl_fd), F(rpma_conn_get_cq),
	F(rpma_conn_get_event_fd), F(rpma_conn_get_private_data), F(rpma_conn_get_qp_num),
	F(rpma_conn_get_rcq), F(rpma_conn_next_event), F(rpma_conn_req_connect), F(rpma_conn_req_delete),
	F(rpma_conn_req_get_private_data), F(rpma_conn_req_new), F(rpma_conn_req_recv), F(rpma_conn_wait),
	F(rpma_cq_get_fd), F(rpma_cq_get_wc), F(rpma_cq_wait), F(rpma_ep_get_fd), F(rpma_ep_listen),
	F(rpma_ep_next_conn_req), F(rpma_ep_shutdown), F(rpma_err_2str), F(rpma_flush),
	F(rpma_log_get_threshold), F(rpma_log_set_function), F(rpma_log_set_threshold), F(rpma_mr_advise),
	F(rpma_mr_dereg), F(rpma_mr_get_descriptor), F(rpma_mr_get_descriptor_size), F(rpma_mr_get_ptr),
	F(rpma_mr_get_size), F(rpma_mr_reg), F(rpma_mr_remote_delete), F(rpma_mr_remote_from_descriptor),
	F(rpma_mr_remote_get_flush_type), F(rpma_mr_remote_get_size), F(rpma_peer_cfg_delete),
	F(rpma_peer_cfg_from_descriptor), F(rpma_peer_cfg_get_descriptor),
	F(rpma_peer_cfg_get_descriptor_size), F(rpma_peer_cfg_get_direct_write_to_pmem),
	F(rpma_peer_cfg_new), F(rpma_peer_cfg_set_direct_write_to_pmem), F(rpma_peer_delete),
	F(rpma_peer_new), F(rpma_read), F(rpma_recv), F(rpma_send), F(rpma_send_with_imm),
	F(rpma_srq_cfg_delete), F(rpma_srq_cfg_get_rcq_size), F(rpma_srq_cfg_get_rq_size),
	F(rpma_srq_cfg_new), F(rpma_srq_cfg_set_rcq_size), F(rpma_srq_cfg_set_rq_size),
	F(rpma_srq_delete), F(rpma_srq_get_rcq), F(rpma_srq_new), F(rpma_srq_recv),
	F(rpma_utils_conn_event_2str), F(rpma_utils_get_ibv_context),
	F(rpma_utils_ibv_context_is_odp_capable), F(rpma_write), F(rpma_write_with_imm),
};

#define CHECK(what, call) printf("%-58s %d\n", what, (call))

static int logged;
static void
log_fn(enum rpma_log_level level, const char *file, const int line, const char *func,
	const char *fmt, ...)
{
	(void) level; (void) file; (void) line; (void) func; (void) fmt;
	logged++;
}

int
main(int argc, char *argv[])
{
	size_t n = sizeof(functions) / sizeof(functions[0]);
	if (argc > 1 && strcmp(argv[1], "symbols") == 0) {
		for (size_t i = 0; i < n; i++)
			printf("%s %d\n", functions[i].name, functions[i].fn != NULL);
		return 0;
	}
	printf("functions %zu\n", n);

	for (int e = -100010; e <= -100000; e++)
		printf("err_2str(%d) %s\n", e, rpma_err_2str(e));
	printf("err_2str(0) %s\n", rpma_err_2str(0));
	for (int e = -2; e <= 5; e++)
		printf("conn_event_2str(%d) %s\n", e, rpma_utils_conn_event_2str((enum rpma_conn_event)e));

	/* connection configuration: defaults, round trips, bad input */
	struct rpma_conn_cfg *cfg = NULL;
	CHECK("conn_cfg_new(NULL)", rpma_conn_cfg_new(NULL));
	CHECK("conn_cfg_new", rpma_conn_cfg_new(&cfg));
	int timeout = 0;
	uint32_t u = 0;
	bool b = true;
	CHECK("get_timeout", rpma_conn_cfg_get_timeout(cfg, &timeout));
	printf("default timeout %d\n", timeout);
	CHECK("get_cq_size", rpma_conn_cfg_get_cq_size(cfg, &u));
	printf("default cq_size %u\n", u);
	CHECK("get_rcq_size", rpma_conn_cfg_get_rcq_size(cfg, &u));
	printf("default rcq_size %u\n", u);
	CHECK("get_sq_size", rpma_conn_cfg_get_sq_size(cfg, &u));
	printf("default sq_size %u\n", u);
	CHECK("get_rq_size", rpma_conn_cfg_get_rq_size(cfg, &u));
	printf("default rq_size %u\n", u);
	CHECK("get_compl_channel", rpma_conn_cfg_get_compl_channel(cfg, &b));
	printf("default compl_channel %d\n", b);
	struct rpma_srq *srq = (struct rpma_srq *)&srq;
	CHECK("get_srq", rpma_conn_cfg_get_srq(cfg, &srq));
	printf("default srq %p\n", (void *)srq);
	CHECK("set_timeout(-1)", rpma_conn_cfg_set_timeout(cfg, -1));
	CHECK("set_timeout(500)", rpma_conn_cfg_set_timeout(cfg, 500));
	CHECK("set_cq_size(77)", rpma_conn_cfg_set_cq_size(cfg, 77));
	CHECK("set_rcq_size(5)", rpma_conn_cfg_set_rcq_size(cfg, 5));
	CHECK("set_sq_size(33)", rpma_conn_cfg_set_sq_size(cfg, 33));
	CHECK("set_rq_size(44)", rpma_conn_cfg_set_rq_size(cfg, 44));
	CHECK("set_compl_channel(true)", rpma_conn_cfg_set_compl_channel(cfg, true));
	rpma_conn_cfg_get_timeout(cfg, &timeout);
	printf("timeout %d\n", timeout);
	rpma_conn_cfg_get_cq_size(cfg, &u);
	printf("cq_size %u\n", u);
	rpma_conn_cfg_get_rcq_size(cfg, &u);
	printf("rcq_size %u\n", u);
	rpma_conn_cfg_get_sq_size(cfg, &u);
	printf("sq_size %u\n", u);
	rpma_conn_cfg_get_rq_size(cfg, &u);
	printf("rq_size %u\n", u);
	rpma_conn_cfg_get_compl_channel(cfg, &b);
	printf("compl_channel %d\n", b);
	/*
	 * The SRQ is only stored until a connection request uses the cfg: a
	 * pointer that is not (or not yet) an SRQ is taken and handed back,
	 * never read; NULL is refused.
	 */
	CHECK("set_srq(NULL)", rpma_conn_cfg_set_srq(cfg, NULL));
	struct rpma_srq *not_yet = (struct rpma_srq *)(void *)&timeout;
	CHECK("set_srq(not yet an SRQ)", rpma_conn_cfg_set_srq(cfg, not_yet));
	rpma_conn_cfg_get_srq(cfg, &srq);
	printf("srq stored as given %d\n", srq == not_yet);
	CHECK("set_srq(NULL cfg)", rpma_conn_cfg_set_srq(NULL, not_yet));
	CHECK("set_cq_size(NULL cfg)", rpma_conn_cfg_set_cq_size(NULL, 1));
	CHECK("get_cq_size(NULL out)", rpma_conn_cfg_get_cq_size(cfg, NULL));
	CHECK("conn_cfg_delete", rpma_conn_cfg_delete(&cfg));
	printf("cfg after delete %p\n", (void *)cfg);
	CHECK("conn_cfg_delete(&NULL)", rpma_conn_cfg_delete(&cfg));
	CHECK("conn_cfg_delete(NULL)", rpma_conn_cfg_delete(NULL));

	/* SRQ configuration */
	struct rpma_srq_cfg *scfg = NULL;
	CHECK("srq_cfg_new", rpma_srq_cfg_new(&scfg));
	CHECK("srq_cfg_get_rq_size", rpma_srq_cfg_get_rq_size(scfg, &u));
	printf("srq default rq_size %u\n", u);
	CHECK("srq_cfg_get_rcq_size", rpma_srq_cfg_get_rcq_size(scfg, &u));
	printf("srq default rcq_size %u\n", u);
	CHECK("srq_cfg_set_rq_size(9)", rpma_srq_cfg_set_rq_size(scfg, 9));
	rpma_srq_cfg_get_rq_size(scfg, &u);
	printf("srq rq_size %u\n", u);
	CHECK("srq_cfg_delete", rpma_srq_cfg_delete(&scfg));

	/* peer configuration and its descriptor */
	struct rpma_peer_cfg *pcfg = NULL, *pcfg2 = NULL;
	size_t size = 0;
	unsigned char desc[32];
	memset(desc, 0xAA, sizeof(desc));
	CHECK("peer_cfg_new", rpma_peer_cfg_new(&pcfg));
	CHECK("peer_cfg_get_direct_write_to_pmem", rpma_peer_cfg_get_direct_write_to_pmem(pcfg, &b));
	printf("default direct_write_to_pmem %d\n", b);
	CHECK("peer_cfg_set_direct_write_to_pmem(true)", rpma_peer_cfg_set_direct_write_to_pmem(pcfg, true));
	CHECK("peer_cfg_get_descriptor_size", rpma_peer_cfg_get_descriptor_size(pcfg, &size));
	printf("peer_cfg descriptor size %zu\n", size);
	CHECK("peer_cfg_get_descriptor", rpma_peer_cfg_get_descriptor(pcfg, desc));
	printf("peer_cfg descriptor %02x %02x\n", desc[0], desc[1]);
	CHECK("peer_cfg_from_descriptor", rpma_peer_cfg_from_descriptor(desc, size, &pcfg2));
	rpma_peer_cfg_get_direct_write_to_pmem(pcfg2, &b);
	printf("decoded direct_write_to_pmem %d\n", b);
	CHECK("peer_cfg_from_descriptor(NULL)", rpma_peer_cfg_from_descriptor(NULL, 1, &pcfg2));
	CHECK("peer_cfg_delete", rpma_peer_cfg_delete(&pcfg));
	CHECK("peer_cfg_delete 2", rpma_peer_cfg_delete(&pcfg2));

	/* a remote region descriptor (librpma's 21 bytes, little-endian) */
	unsigned char mrd[21] = {
		0x00, 0x10, 0, 0, 0, 0, 0, 0,		/* addr 0x1000 */
		0x00, 0x20, 0, 0, 0, 0, 0, 0,		/* size 0x2000 */
		0x78, 0x56, 0x34, 0x12,			/* rkey */
		RPMA_MR_USAGE_WRITE_DST | RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT,
	};
	struct rpma_mr_remote *rmr = NULL;
	int ft = 0;
	CHECK("mr_remote_from_descriptor(20 bytes)", rpma_mr_remote_from_descriptor(mrd, 20, &rmr));
	CHECK("mr_remote_from_descriptor", rpma_mr_remote_from_descriptor(mrd, 21, &rmr));
	CHECK("mr_remote_get_size", rpma_mr_remote_get_size(rmr, &size));
	printf("remote size %zu\n", size);
	CHECK("mr_remote_get_flush_type", rpma_mr_remote_get_flush_type(rmr, &ft));
	printf("remote flush type %d\n", ft);
	CHECK("mr_remote_delete", rpma_mr_remote_delete(&rmr));
	printf("rmr after delete %p\n", (void *)rmr);

	/* NULL and invalid arguments of calls that need a device */
	CHECK("peer_new(NULL ctx)", rpma_peer_new(NULL, NULL));
	CHECK("mr_reg(NULL peer)", rpma_mr_reg(NULL, desc, 8, RPMA_MR_USAGE_READ_SRC, NULL));
	CHECK("mr_dereg(NULL)", rpma_mr_dereg(NULL));
	CHECK("ep_listen(NULL peer)", rpma_ep_listen(NULL, "127.0.0.1", "7204", NULL));
	CHECK("conn_req_new(NULL peer)", rpma_conn_req_new(NULL, "127.0.0.1", "7204", NULL, NULL));
	CHECK("conn_req_connect(NULL)", rpma_conn_req_connect(NULL, NULL, NULL));
	CHECK("read(NULL conn)", rpma_read(NULL, NULL, 0, NULL, 0, 0, RPMA_F_COMPLETION_ALWAYS, NULL));
	CHECK("write(NULL conn)", rpma_write(NULL, NULL, 0, NULL, 0, 0, RPMA_F_COMPLETION_ALWAYS, NULL));
	CHECK("flush(NULL conn)", rpma_flush(NULL, NULL, 0, 0, RPMA_FLUSH_TYPE_VISIBILITY,
		RPMA_F_COMPLETION_ALWAYS, NULL));
	CHECK("send(NULL conn)", rpma_send(NULL, NULL, 0, 0, RPMA_F_COMPLETION_ALWAYS, NULL));
	CHECK("recv(NULL conn)", rpma_recv(NULL, NULL, 0, 0, NULL));
	CHECK("cq_get_wc(NULL cq)", rpma_cq_get_wc(NULL, 1, NULL, NULL));
	CHECK("cq_wait(NULL)", rpma_cq_wait(NULL));
	CHECK("conn_next_event(NULL)", rpma_conn_next_event(NULL, NULL));
	CHECK("conn_delete(NULL)", rpma_conn_delete(NULL));
	CHECK("ep_shutdown(NULL)", rpma_ep_shutdown(NULL));
	CHECK("srq_new(NULL peer)", rpma_srq_new(NULL, NULL, NULL));
	CHECK("utils_get_ibv_context(NULL)", rpma_utils_get_ibv_context(NULL, RPMA_UTIL_IBV_CONTEXT_LOCAL, NULL));

	/* logging */
	enum rpma_log_level level;
	CHECK("log_get_threshold(main)", rpma_log_get_threshold(RPMA_LOG_THRESHOLD, &level));
	printf("main threshold %d\n", level);
	CHECK("log_get_threshold(aux)", rpma_log_get_threshold(RPMA_LOG_THRESHOLD_AUX, &level));
	printf("aux threshold %d\n", level);
	CHECK("log_set_threshold(main, DEBUG)", rpma_log_set_threshold(RPMA_LOG_THRESHOLD, RPMA_LOG_LEVEL_DEBUG));
	rpma_log_get_threshold(RPMA_LOG_THRESHOLD, &level);
	printf("main threshold %d\n", level);
	CHECK("log_set_threshold(7, DEBUG)", rpma_log_set_threshold((enum rpma_log_threshold)7,
		RPMA_LOG_LEVEL_DEBUG));
	CHECK("log_set_threshold(main, 9)", rpma_log_set_threshold(RPMA_LOG_THRESHOLD, (enum rpma_log_level)9));
	CHECK("log_get_threshold(main, NULL)", rpma_log_get_threshold(RPMA_LOG_THRESHOLD, NULL));
	CHECK("log_set_function(custom)", rpma_log_set_function(log_fn));
	CHECK("log_set_function(default)", rpma_log_set_function(RPMA_LOG_USE_DEFAULT_FUNCTION));
	return 0;
}
