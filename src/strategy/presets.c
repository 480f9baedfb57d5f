/* Named systems of the literature as settings of the taxonomy axes. The
 * options string is applied before the user's own options, so anything
 * given explicitly overrides the preset. */
#include <string.h>

#include "dtrain/train.h"

static const preset_t PRESETS[] = {
    {"horovod", "central / sync / allreduce:ring, tensor fusion 64 MB, overlap",
     "Sergeev & Del Balso 2018, Horovod (ring allreduce after Baidu)",
     "--optimization central --schedule sync --exchange allreduce:ring --bucket-mb 64 --overlap on"},
    {"pytorch-ddp", "central / sync / allreduce:ring, 25 MB buckets, overlap with backprop",
     "Li et al. 2020, PyTorch Distributed (DDP)",
     "--optimization central --schedule sync --exchange allreduce:ring --bucket-mb 25 --overlap on"},
    {"bytescheduler", "central / sync / allreduce:ring, per-layer buckets in 1 MB parts, first "
                      "layers first, updates applied during the next forward pass",
     "Peng et al. 2019, A Generic Communication Scheduler for Distributed DNN Training "
     "Acceleration (ByteScheduler); Jayarajan et al. 2019, Priority-based Parameter Propagation (P3)",
     "--optimization central --schedule sync --exchange allreduce:ring --bucket-mb 0 --overlap on "
     "--comm-order priority --partition-kb 1024"},
    {"firecaffe", "central / sync / allreduce:tree (binomial reduction tree through one root)",
     "Iandola et al. 2016, FireCaffe",
     "--optimization central --schedule sync --exchange allreduce:tree --bucket-mb 1024 --overlap off"},
    {"naive-ps", "central / sync / allreduce:naive (gather to one rank, broadcast back)",
     "the single parameter server baseline",
     "--optimization central --schedule sync --exchange allreduce:naive --bucket-mb 1024 --overlap off"},
    /* decentralized optimization (docs/DECENTRALIZED.md) */
    {"sparknet", "decentral / sync / master: tau local steps, then rank 0 averages the replicas",
     "Moritz et al. 2016, SparkNet: Training Deep Networks in Spark",
     "--optimization decentral --schedule sync --exchange master --tau 8"},
    {"local-sgd", "decentral / sync / allreduce:ring: tau local steps, then the replicas are averaged",
     "Stich 2019, Local SGD Converges Fast and Communicates Little; Lin et al. 2020",
     "--optimization decentral --schedule sync --exchange allreduce:ring --tau 8"},
    {"easgd", "decentral / sync / master (a rank of its own): elastic averaging with a centre",
     "Zhang, Choromanska & LeCun 2015, Deep learning with Elastic Averaging SGD (eq. 3-4)",
     "--optimization decentral --schedule sync --exchange master --beta 0.9 --tau 4"},
    {"easgd-async", "decentral / async / master (a rank of its own): elastic exchanges at each worker's pace",
     "Zhang, Choromanska & LeCun 2015, Deep learning with Elastic Averaging SGD (Algorithm 1)",
     "--optimization decentral --schedule async --exchange master --beta 0.9 --tau 4"},
    {"deepspark", "decentral / async / master: asynchronous EASGD whose moving rate alpha decays",
     "Kim et al. 2016, DeepSpark: Spark-Based Deep Learning (asynchronous EASGD, adaptive moving rate)",
     "--optimization decentral --schedule async --exchange master --beta 0.9 --tau 4 --alpha-decay 0.5,50,2"},
    {"d-psgd", "decentral / sync / neighbors: every step, mix with the two ring neighbours",
     "Lian et al. 2017, Can Decentralized Algorithms Outperform Centralized Algorithms? (D-PSGD)",
     "--optimization decentral --schedule sync --exchange neighbors --neighbor-weight 0.333333"},
    {"ad-psgd", "decentral / async / neighbors: atomic averages with a random neighbour, no barrier",
     "Lian, Zhang, Zhang & Liu 2018, Asynchronous Decentralized Parallel SGD (AD-PSGD, Algorithm 1)",
     "--optimization decentral --schedule async --exchange neighbors"},
    {"gosgd", "decentral / async / gossip: sum-weighted gossip to a random peer with probability p",
     "Blot et al. 2016, Gossip Training for Deep Learning (GoSGD)",
     "--optimization decentral --schedule async --exchange gossip:0.1"},
    {"tree-easgd", "decentral / async / tree:2: elastic exchanges with parent and children",
     "Zhang 2016, Distributed Stochastic Optimization for Deep Learning (PhD thesis, EASGD tree)",
     "--optimization decentral --schedule async --exchange tree:2 --tau-up 2 --tau-down 2"},
    {"mpca-sgd", "decentral / soft / master (a rank of its own): a penalty toward the centre "
                 "extrapolated one round, rounds on a binomial tree overlapping the next tau steps",
     "Langer, Hall, He & Rahayu 2018, MPCA SGD: A Method for Distributed Training of Deep "
     "Learning Models on Spark (as the taxonomy's sec. 4.1 and Table 1 describe it)",
     "--optimization decentral --schedule soft --exchange master --tau 4 --rho 1 --beta 0.9 "
     "--extrapolation 1"},
    /* parameter servers (docs/PARAMETER_SERVER.md) */
    {"distbelief", "central / async (Downpour SGD) / ps:2: sharded servers apply each push on arrival",
     "Dean et al. 2012, Large Scale Distributed Deep Networks (DistBelief, Downpour SGD)",
     "--optimization central --schedule async --exchange ps:2 --fetch-every 1 --push-every 1"},
    {"parameter-server", "central / ssp:2 (bounded delay) / ps:2 sharded servers",
     "Li et al. 2014, Scaling Distributed Machine Learning with the Parameter Server (bounded delay)",
     "--optimization central --schedule ssp:2 --exchange ps:2"},
    {"petuum", "central / ssp:3 (stale synchronous parallel) / ps:2, every worker's model "
               "refreshed after each clock (ESSP, eager)",
     "Ho et al. 2013, More Effective Distributed ML via a Stale Synchronous Parallel Parameter "
     "Server (Petuum Bosen); Dai et al. 2015, High-Performance Distributed ML at Scale through "
     "Parameter Server Consistency Models (ESSP); the taxonomy's Table 1: eager distribution",
     "--optimization central --schedule ssp:3 --exchange ps:2 --ps-refresh eager"},
    {"bosen-ssp", "central / ssp:3 / ps:2, Bosen's SSP cache: a worker pulls only when the "
                  "model it holds is more than 3 clocks old (lazy)",
     "Ho et al. 2013, More Effective Distributed ML via a Stale Synchronous Parallel Parameter "
     "Server (Petuum Bosen, SSP); the baseline of Dai et al. 2015's ESSP",
     "--optimization central --schedule ssp:3 --exchange ps:2 --ps-refresh lazy"},
    /* The taxonomy's Table 1 lists TensorFlow and MXNet as bounded
     * asynchronous. TensorFlow's paper bounds staleness with its
     * synchronous replicas and backup workers (sec. 4.4, fig. 7; the
     * taxonomy cites it for ending a step at a quorum, sec. 3.3.1): a
     * gradient computed on an older step is dropped, so none applied is
     * stale. MXNet's KVStore modes (dist_sync, dist_async) set no
     * staleness bound; the taxonomy's bounded reading is ps-lite's bounded
     * delay (preset parameter-server, or add --schedule ssp:S). */
    {"bytescheduler-ps", "central / sync / ps:n, each layer pushed in 1 MB parts as backprop readies it, "
                         "pulled back first layer first with a credit, the forward waiting per layer",
     "Peng et al. 2019, A Generic Communication Scheduler for Distributed DNN Training "
     "Acceleration (ByteScheduler: its scheduler covers MXNet's parameter servers too)",
     "--optimization central --schedule sync --exchange ps:n --comm-order priority --partition-kb 1024"},
    {"tictac", "central / sync / ps:n, transfers ordered by when the forward pass first needs "
               "each layer (measured times; ties: the smaller first), the forward waiting per layer",
     "Hashemi et al. 2019, TicTac: Accelerating Distributed Deep Learning with Communication "
     "Scheduling (TAC, on TensorFlow's parameter servers)",
     "--optimization central --schedule sync --exchange ps:n --comm-order tictac --partition-kb 1024"},
    {"tensorflow-ps", "central / backup:1 (bounded: a step takes the first N-1 gradients, a gradient "
                      "of an older step is dropped) / ps:n: a server beside every worker",
     "Abadi et al. 2016, TensorFlow: A System for Large-Scale Machine Learning (sec. 4.4, "
     "synchronous replicas with backup workers; the taxonomy's Table 1: bounded asynchronous)",
     "--optimization central --schedule backup:1 --exchange ps:n"},
    {"mxnet", "central / async / ps:n: KVStore dist_async, a server on every machine (no staleness "
              "bound: the taxonomy's Table 1 says bounded asynchronous; add --schedule ssp:S for "
              "ps-lite's bounded delay)",
     "Chen et al. 2015, MXNet: A Flexible and Efficient Machine Learning Library for Heterogeneous "
     "Distributed Systems (KVStore dist_async)",
     "--optimization central --schedule async --exchange ps:n"},
    {"bigdl", "central / sync / ps:n: every worker also serves 1/n of the model",
     "Dai et al. 2019, BigDL: A Distributed Deep Learning Framework for Big Data",
     "--optimization central --schedule sync --exchange ps:n"},
    {"hogwild", "central / async / shared: lock-free updates of one arena by worker threads (local)",
     "Niu, Recht, Re & Wright 2011, Hogwild!: A Lock-Free Approach to Parallelizing SGD",
     "--optimization central --schedule async --exchange shared"},
    {"sync-backup", "central / backup:1 / ps:1: each step takes the first N-1 gradients, drops the last",
     "Chen, Pan, Monga, Bengio & Jozefowicz 2016, Revisiting Distributed Synchronous SGD",
     "--optimization central --schedule backup:1 --exchange ps:1"},
    {"dc-asgd", "central / async / ps:1 with delay compensation (lambda 0.04)",
     "Zheng et al. 2017, Asynchronous Stochastic Gradient Descent with Delay Compensation",
     "--optimization central --schedule async --exchange ps:1 --dc-asgd 0.04"},
    {"project-adam", "central / async / ps:2, each replica a tensor-parallel group of 2 ranks "
                     "(dense layers split, convolutions whole), each rank pushing its own "
                     "block, its dense layers as sufficient factors (activations and error "
                     "terms) from which the servers compute the updates, each server's "
                     "updates applied by 2 threads without locks; an epoch ends once 75% "
                     "of its batches are pushed",
     "Chilimbi et al. 2014, Project Adam: Building an Efficient and Scalable Deep Learning "
     "Training System",
     "--optimization central --schedule async --exchange ps:2 --tp 2 --epoch-fraction 0.75 "
     "--ps-push factors --ps-server-threads 2"},
    /* gradient compression (src/compress/): synchronous data parallelism */
    {"horovod-fp16", "central / sync / allreduce:ring, gradients sent as fp16 (no error feedback)",
     "Sergeev & Del Balso 2018, Horovod (--fp16-allreduce, hvd.Compression.fp16)",
     "--optimization central --schedule sync --exchange allreduce:ring --bucket-mb 64 --overlap on "
     "--compress fp16 --error-feedback off"},
    {"onebit-sgd", "central / sync / allreduce: 1 bit a value with error feedback",
     "Seide et al. 2014, 1-Bit Stochastic Gradient Descent and its Application to Data-Parallel "
     "Distributed Training of Speech DNNs",
     "--optimization central --schedule sync --exchange allreduce:ring --compress onebit"},
    {"ef-sgdm", "central / sync / allreduce: 1 bit a value of the momentum step, error fed back "
                "on the workers and on the owner of each block of the sum, whose decoded sum is "
                "the next momentum (the paper's scaled sign per block replaced by 1-bit SGD's "
                "two means per column)",
     "Zheng, Huang & Kwok 2019, Communication-Efficient Distributed Blockwise Momentum SGD with "
     "Error-Feedback",
     "--optimization central --schedule sync --exchange allreduce:ring --compress onebit "
     "--momentum-correction shared"},
    {"qsgd", "central / sync / allreduce: QSGD, 7 levels (4 bits a value), buckets of 512",
     "Alistarh et al. 2017, QSGD: Communication-Efficient SGD via Gradient Quantization and Encoding",
     "--optimization central --schedule sync --exchange allreduce:ring --compress qsgd:7"},
    {"terngrad", "central / sync / allreduce: ternary gradients {-s, 0, s}, s a tensor's, "
                 "shared by the workers (their max) and clipped at 2.5 standard deviations "
                 "(the paper's scaler sharing and gradient clipping)",
     "Wen et al. 2017, TernGrad: Ternary Gradients to Reduce Communication in Distributed Deep Learning",
     "--optimization central --schedule sync --exchange allreduce:ring --compress terngrad:2.5"},
    {"dgc", "central / sync / allgather of the top 0.1%, SGD with momentum 0.9 as the paper's "
            "(momentum correction, factor masking; "
            "the sparsity warm-up is --compress-warmup-steps N, off here: it changed nothing "
            "on mlp, cost lenet 0.7 points over one epoch, and multiplied the bytes: 3x on mlp, "
            "18x on lenet)",
     "Lin et al. 2018, Deep Gradient Compression: Reducing the Communication Bandwidth for "
     "Distributed Training",
     "--optimization central --schedule sync --exchange allreduce:ring --compress dgc:0.001 "
     "--momentum 0.9"},
    {"poseidon", "central / sync / allreduce, overlapped with backprop; dense layers send their "
                 "sufficient factors where fewer bytes (hybrid communication)",
     "Zhang et al. 2017, Poseidon: An Efficient Communication Architecture for Distributed Deep "
     "Learning on GPU Clusters (wait-free backprop, sufficient factor broadcasting)",
     "--optimization central --schedule sync --exchange allreduce:ring --overlap on "
     "--sufficient-factors on"},
    {"choco-sgd", "decentral / sync / neighbors: D-PSGD's gossip compressed, top 1% of each "
                  "change, public copies of the neighbours' models, gossip step 0.2",
     "Koloskova, Stich & Jaggi 2019, Decentralized Stochastic Optimization and Gossip Algorithms "
     "with Compressed Communication (CHOCO-SGD)",
     "--optimization decentral --schedule sync --exchange neighbors --compress topk:0.01 "
     "--consensus-step 0.2"},
    {"powersgd", "central / sync / allreduce of rank-2 factors (error feedback, warm start; the "
                 "first 100 steps dense, as the authors' reference implementation)",
     "Vogels et al. 2019, PowerSGD: Practical Low-Rank Gradient Compression for Distributed "
     "Optimization",
     "--optimization central --schedule sync --exchange allreduce:ring --compress powersgd:2 "
     "--compress-warmup-steps 100"},
    /* pipeline parallelism (src/strategy/pipe/): --workers = dp x pp */
    {"gpipe", "central / sync / pipeline pp 2, 8 micro-batches: all forwards, all backwards, one "
              "synchronous update",
     "Huang et al. 2019, GPipe: Efficient Training of Giant Neural Networks using Pipeline Parallelism",
     "--optimization central --schedule sync --exchange allreduce:ring --workers 2 --pp 2 "
     "--micro-batches 8 --pipe-schedule gpipe"},
    {"pipedream-flush", "central / sync / pipeline pp 2, 8 micro-batches, 1F1B: one forward, one "
                        "backward, a flush per step",
     "Narayanan et al. 2021, Memory-Efficient Pipeline-Parallel DNN Training (PipeDream-2BW's "
     "PipeDream-Flush); Harlap et al. 2018, PipeDream (1F1B)",
     "--optimization central --schedule sync --exchange allreduce:ring --workers 2 --pp 2 "
     "--micro-batches 8 --pipe-schedule 1f1b"},
    {"distbelief-mp", "central / sync / model parallelism by layers: pp 2, one micro-batch; on a model "
                      "whose local2d layers say split=rows, those layers cut into bands of rows over "
                      "the 2 ranks instead (tp 2: halos between bands, the bands gathered before the "
                      "dense layers)",
     "Dean et al. 2012, Large Scale Distributed Deep Networks (DistBelief's model parallelism)",
     "--optimization central --schedule sync --exchange allreduce:ring --workers 2 --pp 2 "
     "--micro-batches 1"},
    {"pipedream", "central / pipeline pp 2 without a flush: 1F1B over whole batches, each stage "
                  "updating after every backward, weight stashing",
     "Narayanan et al. 2019, PipeDream: Generalized Pipeline Parallelism for DNN Training (SOSP)",
     "--optimization central --schedule sync --exchange allreduce:ring --workers 2 --pp 2 "
     "--micro-batches 1 --pipe-schedule pipedream --vertical-sync off"},
    {"pipedream-2bw", "central / pipeline pp 2, 4 micro-batches without a flush: two weight "
                      "versions, gradients of a step summed, applied one step late (with "
                      "momentum, add --nesterov: the delay's compensation, docs/BENCHMARKS.md)",
     "Narayanan et al. 2021, Memory-Efficient Pipeline-Parallel DNN Training (ICML; PipeDream-2BW)",
     "--optimization central --schedule sync --exchange allreduce:ring --workers 2 --pp 2 "
     "--micro-batches 4 --pipe-schedule 2bw"},
    {"ddg", "central / pipeline of K = 2 modules, decoupled backward: module k updated with a "
            "gradient K - k steps late",
     "Huo, Gu, Yang & Huang 2018, Decoupled Parallel Backpropagation with Convergence Guarantee "
     "(ICML; DDG)",
     "--optimization central --schedule sync --exchange allreduce:ring --workers 2 --pp 2 "
     "--micro-batches 1 --pipe-schedule ddg"},
    /* tensor parallelism and hybrids (src/strategy/tensor/): --workers = dp x pp x tp */
    {"megatron", "central / sync / tensor parallelism tp 2 (Megatron's column/row pairs) inside "
                 "pipeline stages pp 2, 1F1B over 4 micro-batches; tp ranks adjacent (one host)",
     "Shoeybi et al. 2019, Megatron-LM; Narayanan et al. 2021, Efficient Large-Scale Language "
     "Model Training on GPU Clusters Using Megatron-LM (tp within a node, pp across)",
     "--optimization central --schedule sync --exchange allreduce:ring --workers 4 --tp 2 --pp 2 "
     "--micro-batches 4 --pipe-schedule 1f1b --partition macs"},
    {"one-weird-trick", "central / sync / hybrid: convolutions data-parallel, dense layers split "
                        "over all 4 workers, the batch exchanged between",
     "Krizhevsky 2014, One weird trick for parallelizing convolutional neural networks",
     "--optimization central --schedule sync --exchange allreduce:ring --workers 4 --tp-conv data"},
    {"distbelief-tp", "central / sync / model parallelism within layers: each dense (and conv) "
                      "pair's neurons split over 2 workers",
     "Dean et al. 2012, Large Scale Distributed Deep Networks (DistBelief's model parallelism: "
     "a layer's nodes partitioned across machines)",
     "--optimization central --schedule sync --exchange allreduce:ring --workers 2 --tp 2"},
};

const preset_t *preset_list(int *count) {
  *count = (int)(sizeof PRESETS / sizeof PRESETS[0]);
  return PRESETS;
}

const preset_t *preset_find(const char *name) {
  int n;
  const preset_t *p = preset_list(&n);
  for (int i = 0; i < n; i++)
    if (!strcmp(p[i].name, name)) return &p[i];
  return NULL;
}
