/* train.h: what a generated training binary hands to the runtime's driver.
 *
 * loomc emits the model (its parameters and state, `loomrt_global_desc`) and
 * the training step (straight-line calls into loomrt.h); the driver supplies
 * everything around it: flags, the data loaders, initialisation,
 * logging, checkpoints and resume, traces. Generated code stays small and
 * readable, and every binary behaves alike. */
#ifndef LOOMRT_TRAIN_H
#define LOOMRT_TRAIN_H

#include "loomrt/loomrt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A parameter or state buffer: initialised with init_kind (the dialect's
 * #loom.init: 0 zeros, 1 ones, 2 normal(a, b), 3 uniform(a, b)); integer
 * buffers (step counters) start at zero. A parameter with from_weights 1
 * starts from the program's weights file (an imported model's values), one
 * with from_weights 2 from `splat`; init_kind is then what --init=random
 * draws instead.
 * A ZeRO-3 parameter shard (num_members > 0) is this rank's block of the
 * concatenation of its members (each described like a parameter and
 * initialised the same way on every rank, in order), zero-padded to
 * padded_numel elements and split evenly over the ranks; its own shape is
 * the block's. A member with mirror_of > 0 is that global itself (ZeRO 1-2
 * master shards: the members stay whole parameters): the shard's block is
 * copied from those globals' initial values instead of drawn. A ZeRO 1-2
 * shard of Adam moments (not a parameter) lists its bucket's parameters the
 * same way with init_kind 0: its zeros, and the layout a checkpoint resumed
 * on another world reads (checkpoint parts' "state_shards"). */
typedef struct loomrt_global_desc {
  const char *name;
  loomrt_dtype dtype;
  int rank;
  int64_t shape[LOOMRT_MAX_RANK];
  int init_kind;
  double a, b;
  int is_param;
  int from_weights;
  size_t num_members;
  const struct loomrt_global_desc *members;
  int64_t padded_numel;
  /* Where the buffer lives (device, or pinned host memory for state the
   * CPU updates), and 1 + the index of the global it starts as a copy of
   * (0: none; an offloaded parameter's device working copy). */
  loomrt_mem_space space;
  int mirror_of;
  /* from_weights == 2: an imported value that is one number repeated (a
   * splat: layer-norm ones, zero biases), filled in rather than stored in
   * the weights file, so a small model file cannot make loomc write
   * gigabytes. */
  double splat;
  /* A shard's members each start at a multiple of this many elements of
   * the bucket (zeros between; 0 or 1: packed), so that ZeRO++'s
   * quantisation blocks never span two tensors. */
  int64_t member_align;
  /* Tensor parallelism (loomc --tensor-parallel): a parameter the ranks of
   * the group split (tp_groups 0: whole). Along dimension tp_dim its full
   * tensor is tp_groups equal groups, and rank t of the group (t = rank mod
   * tensor_parallel) holds part t of each; shape[] is that part. The driver
   * draws the full tensor's values from the seed's stream and keeps its
   * part, so the group starts from the one-rank model's weights. */
  int tp_dim;
  int64_t tp_groups;
  /* Pipeline parallelism: elements the one-rank model draws from the
   * seed's stream, for the parameters before this one that another stage
   * holds, skipped before this one is drawn (0: none), so every stage
   * starts from the one-rank model's values. */
  int64_t init_skip;
} loomrt_global_desc;

typedef struct loomrt_step_ctx_t *loomrt_step_ctx;

/* One argument of the training step, in order. shape[0] is the batch: the
 * rows of this rank. An integer input (labels, token ids) indexes a table
 * of index_limit rows or classes: every value must be in [0, index_limit)
 * (0: not an index, not checked). */
/* What a graph model's input holds (LOOMRT_TASK_GRAPH; every input of the
 * other tasks is ROWS). The sampled mini-batch is a tree: depth 0 the
 * batch's seed nodes, depth d fanouts[d-1] slots of sampled neighbours for
 * each node of depth d-1 (padded slots repeat the parent's id with weight
 * 0). */
typedef enum loomrt_input_role {
  LOOMRT_INPUT_ROWS = 0,         /* rows of the data files */
  LOOMRT_INPUT_NODE_TABLE = 1,   /* the whole feature table [nodes, F], in `space` */
  LOOMRT_INPUT_NODES = 2,        /* node ids of depth `depth` */
  LOOMRT_INPUT_SLOT_WEIGHTS = 3, /* [N_d, 1]: each slot's weight in its parent's sum */
  LOOMRT_INPUT_SELF_WEIGHTS = 4, /* [N_d, 1]: each node's weight of itself (GCN) */
  LOOMRT_INPUT_NODE_LABELS = 5   /* the seeds' labels */
} loomrt_input_role;

typedef struct loomrt_input_desc {
  const char *name;
  loomrt_dtype dtype; /* LOOMRT_F32 or LOOMRT_I64 */
  int rank;
  int64_t shape[LOOMRT_MAX_RANK];
  int64_t index_limit;
  loomrt_input_role role;
  int depth;
  /* Where the driver keeps it: the step's inputs are device buffers except
   * a NODE_TABLE the compiler placed in pinned host memory (read by
   * zero-copy or gathered by the CPU). */
  loomrt_mem_space space;
} loomrt_input_desc;

/* Where the step's inputs come from. TOKENS: a language model, (tokens,
 * targets) both [batch, seq] i64, read from one token file (--data).
 * ARRAYS: any other model (classifiers, graph models): each input from its
 * own .npy file of N rows (--input NAME=FILE.npy), shape [N, ...] with the
 * input's shape after the batch dimension. */
/* GRAPH: a graph model on sampled mini-batches (loomc --model sage / gcn):
 * the driver reads a graph folder (--graph DIR: CSR, features, labels; see
 * docs/graphs.md), samples each step's tree of neighbours with the
 * program's fan-outs and fills the inputs by their roles. */
typedef enum loomrt_task {
  LOOMRT_TASK_TOKENS = 0,
  LOOMRT_TASK_ARRAYS = 1,
  LOOMRT_TASK_GRAPH = 2
} loomrt_task;

/* How a graph model's sampler weights the slots (loomrt_input_role). */
typedef enum loomrt_graph_norm {
  LOOMRT_GRAPH_MEAN = 0, /* GraphSAGE: 1/c over the c neighbours sampled */
  LOOMRT_GRAPH_GCN = 1   /* (d_v/c_v)/sqrt((d_v+1)(d_u+1)); self 1/(d_v+1) */
} loomrt_graph_norm;

/* The layout of loomrt_program and loomrt_global_desc. A binary records the
 * value it was compiled with; the runtime refuses a binary built against
 * another layout (binaries link libloomrt.so, which may be rebuilt under
 * them) instead of misreading it. Bump on any change to these structs. */
/* A Streaming DiLoCo outer step (loomc --diloco): run after the inner step
 * numbered t (from 0) when t + 1 >= offset and t + 1 - offset is a
 * multiple of every, in table order. An async one (the exchange of an
 * overlapped fragment) may run beside the inner steps that follow, with a
 * step context of its own (its streams, arena and communicator); it must
 * be complete before the next entry of the table that is not async runs,
 * before a checkpoint and at the end. */
typedef struct loomrt_outer_desc {
  const char *name;
  loomrt_status (*fn)(loomrt_step_ctx c, void **globals);
  int64_t every, offset;
  int async;
} loomrt_outer_desc;

/* Re-planning (loomc --replan): the plans compiled for other host rates
 * than the description's, each a whole program over the same parameters and
 * state (a checkpoint moves between them), and the cost model's predicted
 * step of each at host-rate factors f (the description's CPU Adam rate, and
 * the DRAM bandwidth it follows, times f). After the warm-up the driver
 * measures the CPU Adam rate, interpolates each candidate's prediction at
 * the measured factor (linearly in log f), and continues under the fastest
 * (a checkpoint written and resumed). */
struct loomrt_program;
typedef struct loomrt_replan {
  int mode;                        /* 0 off, 1 once, 2 continuous */
  size_t num_candidates;           /* candidates[0] is the program itself */
  const struct loomrt_program *const *candidates;
  const char *const *plans;        /* each one's split, for logs */
  size_t num_factors;              /* ascending */
  const double *factors;
  const double *predicted_s;       /* [candidate * num_factors + factor] */
  double nominal_cpu_adam_params_per_s; /* the description's (factor 1) */
} loomrt_replan;

#define LOOMRT_TRAIN_ABI 21
typedef struct loomrt_program {
  int abi;             /* LOOMRT_TRAIN_ABI as the binary saw it */
  const char *model;   /* what was compiled, for --help and logs */
  loomrt_backend backend;
  size_t num_globals;
  const loomrt_global_desc *globals;
  int64_t batch, seq;  /* the token batch the step takes (ARRAYS: seq 0) */
  int64_t vocab;       /* token ids must be below this (0: not known) */
  /* safetensors file of the from_weights parameters (NULL: none); a
   * relative name is found beside the executable. */
  const char *weights;
  /* One training step on device buffers, one per input (TOKENS: tokens
   * and targets); writes the loss (device fp32 scalar) to *loss. */
  loomrt_status (*train_step)(loomrt_step_ctx c, void **globals,
                              const void *const *inputs, void **loss);
  /* Data parallelism: the ranks the step was compiled for (1: one) and its
   * ZeRO stage (-1: not data-parallel). With world R the driver must be
   * started on R ranks (mpirun -np R, or torchrun-style variables); rank r
   * trains on rows [r*batch, (r+1)*batch) of each global batch of R*batch
   * rows, so R ranks reproduce one rank with the global batch. */
  int world;
  int zero_stage;
  loomrt_task task;
  size_t num_inputs;
  const loomrt_input_desc *inputs;
  /* 1-bit Adam (loomc --optimizer=onebit-adam): steps numbered from
   * freeze_step on (from 0, a resumed run continuing the count) run
   * train_step_frozen, the ones before train_step. NULL and 0 otherwise. */
  loomrt_status (*train_step_frozen)(loomrt_step_ctx c, void **globals,
                                     const void *const *inputs, void **loss);
  int64_t freeze_step;
  /* 1-bit Adam with ZeRO 1 or 2: run once before the step numbered
   * freeze_step (the warm-up's momentum shards gathered whole for the
   * frozen steps; a run resumed past it has them from its checkpoint).
   * NULL otherwise. */
  loomrt_status (*enter_frozen)(loomrt_step_ctx c, void **globals);
  /* Streaming DiLoCo: outer_start runs before the first step of a fresh run
   * (the global copy starts as the initial parameters; a resumed run has it
   * from its checkpoint), the outer steps after the inner steps they name.
   * NULL and 0 otherwise. */
  loomrt_status (*outer_start)(loomrt_step_ctx c, void **globals);
  size_t num_outer;
  const loomrt_outer_desc *outer;
  /* LOOMRT_TASK_GRAPH: the neighbours sampled per hop (hop 1, the seeds'
   * neighbours, first) and how slots are weighted. 0, NULL otherwise. */
  size_t num_fanouts;
  const int64_t *fanouts;
  loomrt_graph_norm graph_norm;
  /* 1: every rank holds the whole model and optimizer state, so the ranks
   * that remain may go on when one is lost (plain data parallelism with
   * ZeRO stage 0, DiLoCo replicas compiled with elastic=true); 0: a lost
   * rank ends the job (loomrt_comm_set_elastic). Only the elastic TCP
   * transport can lose a rank and go on at all. */
  int elastic;
  /* loomc --device-memory: bytes of device memory the step may use (the
   * driver holds the rest of a larger card back before allocating
   * anything, so an 80 GB card's plan runs on an H200 within 80 GB; the
   * binary's --device-memory overrides it); 0: the whole card. And the
   * cost model's predicted peak device bytes of the step (0: none), which
   * the driver checks against what the cap leaves free. */
  int64_t device_memory_bytes;
  int64_t predicted_device_bytes;
  /* Offloaded optimizers: the parameters the CPU's Adam updates each step
   * and the rate (parameters a second) the plan assumed for it; after three
   * steps the driver reports the rate it measured against it (0, 0: no CPU
   * updates). */
  int64_t cpu_update_params;
  double planned_cpu_adam_params_per_s;
  /* loomc --replan: the other plans and their predictions (NULL: none). */
  const loomrt_replan *replan;
  /* loomc --tensor-parallel: the ranks of each tensor-parallel group (the
   * innermost of the world, numbered fastest; 1: none). The ranks of a
   * group read the same rows: data parallelism is over world /
   * tensor_parallel groups. */
  int tensor_parallel;
  /* loomc --pipeline-parallel: the stages (the outermost level of the
   * world: rank r runs stage r / (world / pipeline_parallel)) and each
   * stage's program, this one among them (1 and NULL: no pipeline). Every
   * stage's program has the same world, batch and data; the ranks of one
   * replica's stages read the same rows, so data parallelism is over world
   * / (pipeline_parallel * tensor_parallel) replicas. */
  int pipeline_parallel;
  const struct loomrt_program *const *stage_programs;
  /* loomc --expert-parallel: the ranks of each expert group (the innermost
   * level of the world: rank r runs stage_programs[r % expert_parallel],
   * the program holding its experts; 1: none). Every rank reads its own
   * rows. */
  int expert_parallel;
  /* 1-bit Adam (train_step_frozen set): K > 0 refreshes the frozen
   * variance K, 2K, 4K, ... steps after freeze_step: optimizer steps (from
   * 1) freeze_step + K(2^(j+1) - 1) run train_step, the warm-up's
   * full-precision step, with loomrt_step_variance_steps the steps since
   * the variance was last updated (0/1 Adam's adaptive freezing, Lu et al.
   * 2022); 0: frozen for good. */
  int64_t variance_refresh;
} loomrt_program;

/* Device memory valid until the end of the current step or until it is
 * given back with loomrt_step_free (after its last use on the step's
 * stream; later allocations of a similar size reuse it). */
void *loomrt_step_alloc(loomrt_step_ctx c, size_t bytes);
void loomrt_step_free(loomrt_step_ctx c, void *p);
/* The compiler's plan (loom-plan-arena): a generated step function first
 * asks for its planned region of `bytes` device bytes (kept and reused
 * every step; grown, never shrunk, when a function needs more), then takes
 * each buffer at the offset the compiler chose. loomrt_step_alloc_at
 * returns NULL when [offset, offset + bytes) is not inside the region;
 * loomrt_step_free of a planned buffer does nothing (its bytes are the
 * plan's). Planned and runtime-placed buffers never share memory. */
loomrt_status loomrt_step_arena(loomrt_step_ctx c, size_t bytes);
void *loomrt_step_alloc_at(loomrt_step_ctx c, size_t offset, size_t bytes);
loomrt_stream loomrt_step_stream(loomrt_step_ctx c);
/* The world's communicator (one rank when not data-parallel), the stream
 * collectives run on, and an event valid for the current step (from a pool
 * the driver reuses every step; NULL when none can be created). */
loomrt_comm loomrt_step_comm(loomrt_step_ctx c);
/* The communicator of the ranks that differ only in the levels of the mask
 * `levels` (bit i: level i of a topology of num_levels levels, innermost
 * first, of the given sizes), split from the world's the first time and
 * kept in the context; NULL with loomrt_last_error set on failure. */
loomrt_comm loomrt_step_group(loomrt_step_ctx c, uint64_t levels, int num_levels,
                              const int64_t *sizes);
loomrt_stream loomrt_step_comm_stream(loomrt_step_ctx c);
loomrt_event loomrt_step_event(loomrt_step_ctx c);
/* Pinned host memory valid until the end of the step (freed with
 * loomrt_step_free), the stream host work runs on (the CPU), and the
 * streams copies run on (direction 0: host to device, 1: device to host). */
void *loomrt_step_alloc_host(loomrt_step_ctx c, size_t bytes);
loomrt_stream loomrt_step_host_stream(loomrt_step_ctx c);
/* The step's host thread (loomrt.host_task): fn(arg) runs there after every
 * task queued before it, then release(arg) (if not null); the issuing
 * thread goes on at once. loomrt_step_host_join waits for every task queued
 * so far and returns the first failure among them (with its message in
 * loomrt_last_error). A task may free step buffers and call the runtime on
 * any stream; it must not allocate or take events (the issuing thread does,
 * in program order). The driver joins after every step. */
typedef loomrt_status (*loomrt_host_fn)(void *arg);
loomrt_status loomrt_step_host_task(loomrt_step_ctx c, loomrt_host_fn fn, void *arg,
                                    void (*release)(void *arg));
loomrt_status loomrt_step_host_join(loomrt_step_ctx c);
loomrt_stream loomrt_step_copy_stream(loomrt_step_ctx c, int direction);
/* The key of dropout `op` in the step being run: loomrt_random_key of the
 * run's --seed, the step (from 0, continued by a resume) and `op`. */
uint64_t loomrt_step_random_key(loomrt_step_ctx c, uint64_t op);
/* The learning rate to use: --lr when given, else the compiled one. */
float loomrt_step_lr(loomrt_step_ctx c, float compiled);
/* 1-bit Adam with a variance refresh (loomrt_program.variance_refresh):
 * the optimizer step (1-based) its frozen steps' bias correction stops at,
 * the last refresh or else the compiled freeze step; and how many steps the
 * variance update of the step being run stands for (the steps since the
 * last update of v: more than 1 on a refresh, else 1). */
int64_t loomrt_step_variance_step(loomrt_step_ctx c, int64_t compiled);
int64_t loomrt_step_variance_steps(loomrt_step_ctx c);
/* A device copy of the `bytes` bytes at `data` (a constant of the binary),
 * made the first time and kept for the run; NULL with loomrt_last_error
 * set when it cannot be made. A step copies its constants from there:
 * device to device, which a graph capture may record (a copy from the
 * binary's own pageable memory it may not). */
const void *loomrt_step_const(loomrt_step_ctx c, const void *data, size_t bytes);
/* A function of the step that loomc found capturable (loom-capture-graphs:
 * only kernels on the compute stream, every buffer in the planned region):
 * body(c, arg) issues its calls. The first call runs it; the second
 * captures it on the compute stream as a graph (CUDA graphs, hipGraph)
 * and launches that, as every later call does instead of issuing the
 * calls one by one, while the globals G[0..num_globals), the pointers in
 * `inputs` and the planned region are the ones it was captured with (else
 * it is captured again). `outs`: where the body writes its results'
 * pointers; a replay writes the captured ones. The body runs uncaptured on
 * backends without graphs (the CPU), with LOOMRT_GRAPHS=off, inside
 * another capture, and, with a line on stderr saying why, where a capture
 * fails or the body takes a runtime-placed buffer. LOOMRT_GRAPHS=report
 * prints each capture. `name` names the function in those lines. */
typedef loomrt_status (*loomrt_graph_body)(loomrt_step_ctx c, void *arg);
loomrt_status loomrt_step_graph(loomrt_step_ctx c, const char *name, void *const *globals,
                                size_t num_globals, const void *const *inputs,
                                size_t num_inputs, void **const *outs, size_t num_outs,
                                loomrt_graph_body body, void *arg);
/* Called by the step once it has issued the backward's last gradient: the
 * driver times the step's two phases from here (the JSON log's
 * backward_ms and update_ms, --trace's forward_backward and update spans),
 * the measured side of loomc --timeline. */
void loomrt_step_backward_done(loomrt_step_ctx c);
/* Around each optimizer update the host runs itself (on the host stream):
 * the driver logs when the first began and how long they took together
 * (the JSON log's cpu_update_start_ms and cpu_update_ms, from the step's
 * start on the host's clock) and draws each on --trace's "cpu" lane, the
 * measured side of loomc --timeline's cpu lane. */
void loomrt_step_host_begin(loomrt_step_ctx c, const char *name);
void loomrt_step_host_end(loomrt_step_ctx c);

/* The binary's main: parses the flags (--data, --steps, --lr, --seed,
 * --init, --weights, --log-json, --checkpoint-dir, --checkpoint-every,
 * --resume, --trace, --comm-timeout) and trains. Returns the process exit
 * code. */
int loomrt_train_main(int argc, char **argv, const loomrt_program *prog);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* LOOMRT_TRAIN_H */
