/*
 * Every environment variable of ps's core, once (each van lists its own in
 * a file of its own, in this format: ps/base/config.h). No include guard:
 * this file is an X-macro list, included several times with different
 * definitions of
 *
 *   PS_CONFIG_VAR(NAME, TYPE, "default", "section", ALIAS_OR_NULL, "help")
 *
 * TYPE is STRING, INT, BOOL, DOUBLE or SIZE (the includer pastes it onto
 * PS_CFG_TYPE_). The default is text, parsed like a value from the
 * environment; "" means unset (required, computed, or not applicable). ALIAS
 * is an older name still honoured (logged as deprecated once), or NULL.
 *
 * Upstream names (DMLC_*, PS_*, BYTEPS_*, STEPMESH_*) keep upstream's
 * defaults so a job script written for ps-lite, BytePS or StepMesh runs
 * unchanged (BYTEPS_RDMA_MAX_CONCURR_WR, honoured with another meaning, has
 * its own). Upstream variables ps does not honour are not listed here: the
 * README's "Differences from upstream" names them and says why. Every entry
 * has a reader (//tests/lint:config_vars_test). Help text is one sentence
 * and names the unit.
 */
#ifndef PS_CONFIG_VAR
#error "define PS_CONFIG_VAR before including ps/base/config_vars.h"
#endif

/* ---- bootstrap: who this process is and how it finds the job ---- */
PS_CONFIG_VAR(DMLC_ROLE, STRING, "", "bootstrap", NULL,
              "Role of this process: scheduler, server, worker or joint (a server and a worker in one process, counted in both DMLC_NUM_SERVER and DMLC_NUM_WORKER: programs start it with ps_postoffice_start_joint, and ps_postoffice_start refuses it with PS_ERR_UNSUPPORTED); required.")
PS_CONFIG_VAR(DMLC_NUM_WORKER, INT, "", "bootstrap", NULL,
              "Number of worker groups in the job; required.")
PS_CONFIG_VAR(DMLC_NUM_SERVER, INT, "", "bootstrap", NULL,
              "Number of server groups in the job; required.")
PS_CONFIG_VAR(DMLC_PS_ROOT_URI, STRING, "", "bootstrap", NULL,
              "IP address or host name of the scheduler; required.")
PS_CONFIG_VAR(DMLC_PS_ROOT_PORT, INT, "", "bootstrap", NULL,
              "TCP port the scheduler listens on (1-65535); required.")
PS_CONFIG_VAR(DMLC_NODE_HOST, STRING, "", "bootstrap", NULL,
              "IP address this node binds and advertises (also the RDMA source address); unset means the address of DMLC_INTERFACE.")
PS_CONFIG_VAR(DMLC_INTERFACE, STRING, "", "bootstrap", NULL,
              "Network interface name whose address this node uses; unset means the first up, non-loopback interface. 'auto': with the ibverbs van, of the interfaces that have an RDMA device and an address, the one whose PCIe path is nearest this process's GPU (STEPMESH_GPU; unset: the CUDA device the process already uses, else 0), found by the PCI address CUDA gives where the process uses CUDA, else as that GPU in PCI order through CUDA_VISIBLE_DEVICES (active ports first among equals); with the other vans as unset.")
PS_CONFIG_VAR(DMLC_PORT, INT, "", "bootstrap", NULL,
              "Fixed TCP port for this node's first listening port; unset means a random free port.")
PS_CONFIG_VAR(DMLC_GROUP_SIZE, INT, "1", "bootstrap", NULL,
              "Instances per server or worker group, 1 to 1024: the job has DMLC_NUM_SERVER x this servers and DMLC_NUM_WORKER x this workers, and instance i of a worker group talks to instance i of every server group only (a process per GPU, or several postoffices in one process with ps_postoffice_start_group).")
PS_CONFIG_VAR(DMLC_RANK, INT, "-1", "bootstrap", NULL,
              "Preferred rank of this node within its role, instances counted (group rank x DMLC_GROUP_SIZE + instance; ps_postoffice_start_group takes it as the group's rank); -1 lets the scheduler assign one.")
PS_CONFIG_VAR(DMLC_NODE_RANK, INT, "", "bootstrap", NULL,
              "Rank of this node's group (StepMesh: the machine); without DMLC_RANK the preferred rank is this x DMLC_GROUP_SIZE + the instance.")
PS_CONFIG_VAR(DMLC_INSTANCE_ID, INT, "", "bootstrap", NULL,
              "This node's instance within its group, 0 to DMLC_GROUP_SIZE - 1; unset means STEPMESH_GPU + DMLC_RANK_OFFSET when STEPMESH_GPU is set, else whatever the rank the scheduler assigns implies.")
PS_CONFIG_VAR(DMLC_RANK_OFFSET, INT, "0", "bootstrap", NULL,
              "Added to STEPMESH_GPU to give the instance when DMLC_INSTANCE_ID is unset (StepMesh: several ps jobs sharing a machine's GPUs).")
PS_CONFIG_VAR(DMLC_WORKER_ID, INT, "", "bootstrap", NULL,
              "Worker index as set by BytePS launchers; used as the preferred worker rank when DMLC_RANK is unset.")
PS_CONFIG_VAR(DMLC_USE_KUBERNETES, BOOL, "0", "bootstrap", NULL,
              "1 makes the scheduler listen on the wildcard address instead of DMLC_PS_ROOT_URI (for Kubernetes services).")
PS_CONFIG_VAR(PS_BIND_ANY, BOOL, "0", "bootstrap", NULL,
              "1 makes every node listen on the wildcard address while still advertising its own address.")
PS_CONFIG_VAR(BYTEPS_ENABLE_MIXED_MODE, BOOL, "0", "bootstrap", NULL,
              "1 makes the scheduler give the first ranks to nodes alone on their host (BytePS mixed mode: servers not co-located with a worker first); it refuses to start a job with BYTEPS_ORDERED_HOSTS set, more than two nodes on a host, or a worker alone on its host.")
PS_CONFIG_VAR(BYTEPS_ORDERED_HOSTS, STRING, "", "bootstrap", NULL,
              "Comma-separated list of ip[:port] fixing the rank order of nodes; unset sorts by host and port.")

/* ---- logging ---- */
PS_CONFIG_VAR(PS_VERBOSE, INT, "0", "logging", NULL,
              "Log verbosity as upstream: 0 errors and warnings, 1 adds connection set-up, 2 adds a line per message.")
PS_CONFIG_VAR(PS_LOG_LEVEL, STRING, "", "logging", NULL,
              "Log level by name (error, warn, info, debug or trace); overrides PS_VERBOSE when set.")
PS_CONFIG_VAR(PS_LOG_COMPONENTS, STRING, "", "logging", NULL,
              "Comma-separated components (core, van, tcp, rdma, ...) whose info and lower lines are shown; unset shows all.")

/* ---- van: which transport, and limits every transport enforces ---- */
PS_CONFIG_VAR(DMLC_ENABLE_RDMA, STRING, "", "van", NULL,
              "Van type: zmq or 0 (TCP), ibverbs or 1, fabric, shm, ...; unset defers to DMLC_PS_VAN_TYPE.")
PS_CONFIG_VAR(DMLC_ENABLE_UCX, BOOL, "0", "van", NULL,
              "1 selects the UCX van regardless of DMLC_ENABLE_RDMA.")
PS_CONFIG_VAR(DMLC_PS_VAN_TYPE, STRING, "zmq", "van", NULL,
              "Van type used when DMLC_ENABLE_RDMA is unset; zmq means the TCP van.")
PS_CONFIG_VAR(DMLC_NUM_PORTS, INT, "1", "van", NULL,
              "Upstream's ports (devices) per node; the tcp van opens the larger of it and PS_TCP_CONNS_PER_PEER connections to each peer, the other vans one (ucx logs a value above 1), a count.")
PS_CONFIG_VAR(PS_BUSY_POLL, BOOL, "0", "van", NULL,
              "1 makes the receive threads of workers and servers spin instead of sleeping in epoll or futex waits (lower latency, one busy core each); the scheduler never spins.")
PS_CONFIG_VAR(PS_SMALL_LANE, BOOL, "1", "van", NULL,
              "1 sends small KV requests and responses (one server, values within a few hundred bytes) on the small lane, without meta or frame, where the van has one (ucx); 0 sends every message the generic way. Off by itself with PS_RESEND or PS_DROP_MSG.")
PS_CONFIG_VAR(PS_BIND_RETRIES, INT, "40", "van", NULL,
              "Number of random ports a node tries before giving up on binding, a count.")
PS_CONFIG_VAR(PS_MAX_META_BYTES, SIZE, "1m", "van", NULL,
              "Largest encoded message meta accepted from a peer, in bytes (k/m/g suffixes allowed).")
PS_CONFIG_VAR(PS_MAX_MESSAGE_BYTES, SIZE, "4g", "van", NULL,
              "Largest total data size of one message accepted from a peer, in bytes (k/m/g suffixes allowed).")
PS_CONFIG_VAR(PS_MAX_DATA_SEGMENTS, INT, "16", "van", NULL,
              "Largest number of data segments in one message accepted from a peer, a count.")
PS_CONFIG_VAR(PS_MAX_PENDING_CONNS, INT, "256", "van", NULL,
              "Most accepted connections that have not finished the handshake (hello, and the job-secret proof when PS_JOB_SECRET is set) a node holds at once; past it a new one is closed at once, a count.")
PS_CONFIG_VAR(PS_HANDSHAKE_TIMEOUT_MS, INT, "5000", "van", NULL,
              "Time an accepted connection has to finish the handshake before it is closed, in milliseconds.")
PS_CONFIG_VAR(PS_RECV_PREALLOC_BYTES, SIZE, "4m", "van", NULL,
              "Largest receive buffer allocated for a message segment on the length its sender announced alone; a bigger one grows as its bytes arrive (tcp) or is allocated once its data message is matched (ucx), in bytes (k/m/g suffixes allowed).")

/* ---- same-host transfers (BytePS IPC); each van's own variables are
 * in its own list (ps/net/tcp/tcp_config_vars.h, ...) ---- */
PS_CONFIG_VAR(BYTEPS_ENABLE_IPC, BOOL, "0", "ipc", NULL,
              "1 talks to peers on the same host through shared memory and to the others through the van DMLC_ENABLE_RDMA, DMLC_ENABLE_UCX or DMLC_PS_VAN_TYPE chooses (van ipc); ignored when that van is shm.")
PS_CONFIG_VAR(PS_DEVICE_IPC, BOOL, "0", "ipc", NULL,
              "1 sends KV device values as IPC handles (CUDA IPC) to the servers the van reaches through shared memory (every peer of the shm van; with the ipc van, BYTEPS_ENABLE_IPC=1, those on this host, while the others get staged bytes): a push from device memory goes as its handle and the server copies the values out of the worker's device memory itself; a pull into device memory sends its destination's handle and the server writes the answer into it, waiting for that copy before it answers. Either way no value byte crosses shared memory and the worker makes no host copy; a descriptor the server cannot use fails that push, or sends that pull's values as bytes. Worker and server must be separate processes that can open each other's handles (one host, one container); 0 stages the values through host memory as every other van does.")
PS_CONFIG_VAR(BYTEPS_PARTITION_BYTES, SIZE, "4096000", "ipc", NULL,
              "Tensor partition size and shared-memory stride per partition, in bytes.")

/* ---- reliability: deadlines, resend, heartbeats ---- */
PS_CONFIG_VAR(PS_START_TIMEOUT_MS, INT, "120000", "reliability", NULL,
              "Longest wait for registration with the scheduler and the start barrier, in milliseconds.")
PS_CONFIG_VAR(PS_BARRIER_TIMEOUT_MS, INT, "600000", "reliability", NULL,
              "Longest wait in a barrier, in milliseconds.")
PS_CONFIG_VAR(PS_REQUEST_TIMEOUT_MS, INT, "600000", "reliability", NULL,
              "Default deadline of a wait on a push or pull, in milliseconds.")
PS_CONFIG_VAR(PS_FINALIZE_TIMEOUT_MS, INT, "-1", "reliability", NULL,
              "Longest time finalize's barrier waits for the other nodes before leaving anyway, in milliseconds; -1 waits, as ps-lite does, until every node arrives or one is declared dead (heartbeats, a closed connection). Also bounds the teardown waits after it (a handler still running, callbacks), 30000 when -1.")
PS_CONFIG_VAR(PS_CONNECT_TIMEOUT_MS, INT, "10000", "reliability", NULL,
              "Longest time to establish one connection to a peer, in milliseconds.")
PS_CONFIG_VAR(PS_RESEND, BOOL, "0", "reliability", NULL,
              "1 acknowledges every data message (push, pull and their answers) and resends those not acknowledged within PS_RESEND_TIMEOUT; control messages ride on the connection and heartbeats.")
PS_CONFIG_VAR(PS_RESEND_TIMEOUT, INT, "1000", "reliability", NULL,
              "Time before an unacknowledged message is resent, in milliseconds.")
PS_CONFIG_VAR(PS_HEARTBEAT_INTERVAL, INT, "5", "reliability", NULL,
              "Interval between heartbeats to the scheduler, in seconds; 0 turns heartbeats off (and, unless PS_HEARTBEAT_TIMEOUT is set, the timeout too).")
PS_CONFIG_VAR(PS_HEARTBEAT_TIMEOUT, INT, "20", "reliability", NULL,
              "Silence after which the scheduler declares a node dead (and a node the scheduler lost), in seconds; 0 means never. Unset with PS_HEARTBEAT_INTERVAL set: 4 intervals, at least 20.")
PS_CONFIG_VAR(PS_DROP_MSG, INT, "0", "reliability", NULL,
              "Percentage of received data messages dropped on purpose, for testing PS_RESEND (0-100); control messages are never dropped.")

/* ---- security ---- */
PS_CONFIG_VAR(PS_JOB_SECRET, STRING, "", "security", NULL,
              "Shared secret every node of the job must prove to join; unset means no authentication.")
PS_CONFIG_VAR(PS_JOB_SECRET_FILE, STRING, "", "security", NULL,
              "Path of a file holding the job secret, used when PS_JOB_SECRET is unset.")
PS_CONFIG_VAR(PS_JOB_ID, STRING, "", "security", NULL,
              "The job's id (letters, digits, '.', '-', '_'; at most 64). On the scheduler: the id it issues (unset: a random one, logged at start). On a server or worker started after the job: proves it restarts a node of this job, so it may take over a dead node. The shm and ipc vans also name their sockets with it.")
PS_CONFIG_VAR(PS_ALLOW_RECOVERY, BOOL, "0", "security", NULL,
              "On the scheduler: any server or worker registering after the job started may take over a dead node (upstream's behaviour), without the job secret or PS_JOB_ID.")

/* ---- byteps-server: the summation server ---- */
PS_CONFIG_VAR(BYTEPS_SERVER_ENGINE_THREAD, INT, "4", "byteps-server", NULL,
              "Number of summation engine threads, a count.")
PS_CONFIG_VAR(BYTEPS_SERVER_ENGINE_BLOCKING, BOOL, "0", "byteps-server", NULL,
              "1 sums inside the request handler instead of on engine threads.")
PS_CONFIG_VAR(BYTEPS_SERVER_ENABLE_SCHEDULE, BOOL, "0", "byteps-server", NULL,
              "1 orders engine work by priority (keys with fewer pushes first) instead of arrival.")
PS_CONFIG_VAR(BYTEPS_ENABLE_ASYNC, BOOL, "0", "byteps-server", NULL,
              "1 sums every push straight into the store and answers pulls at once (asynchronous training).")
PS_CONFIG_VAR(BYTEPS_SERVER_DEBUG, BOOL, "0", "byteps-server", NULL,
              "1 prints the values of BYTEPS_SERVER_DEBUG_KEY at every stage.")
PS_CONFIG_VAR(BYTEPS_SERVER_DEBUG_KEY, INT, "0", "byteps-server", NULL,
              "Key whose values BYTEPS_SERVER_DEBUG prints, a key number.")
PS_CONFIG_VAR(PS_KEY_LOG, BOOL, "0", "byteps-server", NULL,
              "1 makes the server log every key it handles.")

/* ---- stepmesh: the AF tensor API ---- */
PS_CONFIG_VAR(STEPMESH_GPU, INT, "0", "stepmesh", "STEPAF_GPU",
              "Local GPU index of this process, an integer; picks the cores STEPMESH_BIND_CPU_CORE pins to, with DMLC_INTERFACE=auto the RDMA interface nearest that GPU (unset: the CUDA device the process uses), and with DMLC_GROUP_SIZE > 1 and DMLC_INSTANCE_ID unset the instance (plus DMLC_RANK_OFFSET).")
PS_CONFIG_VAR(STEPMESH_BUSY_POLL_ENABLE, BOOL, "1", "stepmesh", "STEPAF_BUSY_POLL_ENABLE",
              "1 makes AF workers' waits and the AF server's batch polling spin instead of sleep.")
PS_CONFIG_VAR(STEPMESH_ENABLE_TRACE, BOOL, "0", "stepmesh", NULL,
              "1 stamps every AF pull slot's request and response with CLOCK_MONOTONIC times (read with ps_af_worker_fetch_trace).")
PS_CONFIG_VAR(STEPMESH_BIND_CPU_CORE, BOOL, "0", "stepmesh", NULL,
              "1 makes ps_af_bind_cpu_core pin its calling thread (the AF benchmark's worker thread) to a core of STEPMESH_GPU's.")
PS_CONFIG_VAR(STEPMESH_CPU_CORES_PER_SOCKET, INT, "48", "stepmesh", NULL,
              "CPU cores per socket for thread pinning, a count; GPUs whose cores do not fit on a socket go to the next.")
PS_CONFIG_VAR(STEPMESH_CPU_CORES_PER_GPU, INT, "5", "stepmesh", NULL,
              "CPU cores set aside for each GPU's threads, a count.")
PS_CONFIG_VAR(STEPMESH_CPU_START_OFFSET, INT, "10", "stepmesh", NULL,
              "Cores at the start of each socket left out of pinning, a count.")

/* ---- profiling ---- */
PS_CONFIG_VAR(ENABLE_PROFILING, BOOL, "0", "profiling", NULL,
              "1 makes every node write one CSV line per message it receives (receive time in wall-clock microseconds, sender, kind, key, bytes) to <PROFILE_PATH><role>_<start time in us>.")
PS_CONFIG_VAR(PROFILE_PATH, STRING, "", "profiling", NULL,
              "Path prefix of the ENABLE_PROFILING file; unset means pslite_profile_van_ in the working directory.")

/* ---- benchmark: read only by tests and benchmark programs ---- */
PS_CONFIG_VAR(NUM_KEY_PER_SERVER, INT, "40", "benchmark", NULL,
              "Keys per server used by the benchmarks, a count.")
PS_CONFIG_VAR(LOG_DURATION, INT, "10", "benchmark", NULL,
              "Rounds between two goodput lines of the benchmarks, a count.")
PS_CONFIG_VAR(TOTAL_DURATION, INT, "2000000000", "benchmark", NULL,
              "Rounds a benchmark runs before it stops, a count.")
PS_CONFIG_VAR(BENCHMARK_NTHREAD, INT, "1", "benchmark", NULL,
              "Worker threads (KV workers) a benchmark runs concurrently, a count.")
PS_CONFIG_VAR(ENABLE_RECV_BUFFER, BOOL, "0", "benchmark", NULL,
              "1 makes test_benchmark's servers register a receive buffer per (worker rank, key) (ps_kv_server_register_recv_buffer, upstream's RegisterRecvBuffer): pushes land there where the van receives in place or come as IPC handles (PS_DEVICE_IPC), and each server reports how many did. With TEST_NUM_GPU_SERVER the buffers are device memory.")
PS_CONFIG_VAR(PS_BENCH_JSON, BOOL, "0", "benchmark", NULL,
              "1 makes test_benchmark add one JSON line per report (as its --json option).")
PS_CONFIG_VAR(TEST_NUM_GPU_WORKER, INT, "0", "benchmark", NULL,
              "Above 0, test_benchmark's workers push from and pull into device memory (of PS_BENCH_DEVICE_KIND); tests/test.sh sets it for gpu2cpu and gpu2gpu.")
PS_CONFIG_VAR(TEST_NUM_GPU_SERVER, INT, "0", "benchmark", NULL,
              "Above 0, test_benchmark's servers keep their store in device memory (of PS_BENCH_DEVICE_KIND); tests/test.sh sets it for cpu2gpu and gpu2gpu.")
PS_CONFIG_VAR(PS_BENCH_DEVICE_KIND, STRING, "cuda", "benchmark", NULL,
              "The device memory TEST_NUM_GPU_WORKER and TEST_NUM_GPU_SERVER use: cuda, or emu (the emulated device of the tests).")
PS_CONFIG_VAR(DEBUG_MODE, BOOL, "0", "benchmark", NULL,
              "1 makes benchmark servers really sum values and log each one.")
PS_CONFIG_VAR(BENCHMARK_WARMUP, INT, "10", "benchmark", NULL,
              "Warm-up iterations the AF benchmarks leave out of their statistics, a count.")
PS_CONFIG_VAR(BENCHMARK_ITER, INT, "2147483647", "benchmark", NULL,
              "Measured iterations per batch size of the AF benchmarks, a count (statistics print every 1000).")
PS_CONFIG_VAR(BENCHMARK_BATCH_START, INT, "64", "benchmark", NULL,
              "First batch size (tokens) of the AF benchmarks, a count.")
PS_CONFIG_VAR(BENCHMARK_BATCH_END, INT, "64", "benchmark", NULL,
              "Last batch size (tokens) of the AF benchmarks, a count.")
PS_CONFIG_VAR(BENCHMARK_BATCH_STEP, INT, "64", "benchmark", NULL,
              "Step between batch sizes of the AF benchmarks, a count.")
PS_CONFIG_VAR(BENCHMARK_WORKER_NUMBER, INT, "1", "benchmark", NULL,
              "Attention workers of the AF benchmark job, a count (servers register receive tensors for each; must equal DMLC_NUM_WORKER).")
PS_CONFIG_VAR(BENCHMARK_SIZE, INT, "7168", "benchmark", NULL,
              "Hidden size of the AF benchmark tensors, in elements per token.")
