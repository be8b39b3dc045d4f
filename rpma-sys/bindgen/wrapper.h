/* The headers rpma-sys binds (see regen.sh). */
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
