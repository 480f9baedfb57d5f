/* Named systems of the literature as settings of the taxonomy axes. The
 * options string is applied before the user's own options, so anything
 * given explicitly overrides the preset. */
#include <string.h>

#include "dtrain/dist.h"

static const preset_t PRESETS[] = {
    {"horovod", "central / sync / allreduce:ring, tensor fusion 64 MB, overlap",
     "Sergeev & Del Balso 2018, Horovod (ring allreduce after Baidu)",
     "--optimization central --schedule sync --exchange allreduce:ring --bucket-mb 64 --overlap on"},
    {"pytorch-ddp", "central / sync / allreduce:ring, 25 MB buckets, overlap with backprop",
     "Li et al. 2020, PyTorch Distributed (DDP)",
     "--optimization central --schedule sync --exchange allreduce:ring --bucket-mb 25 --overlap on"},
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
    {"d-psgd", "decentral / sync / neighbors: every step, mix with the two ring neighbours",
     "Lian et al. 2017, Can Decentralized Algorithms Outperform Centralized Algorithms? (D-PSGD)",
     "--optimization decentral --schedule sync --exchange neighbors --neighbor-weight 0.333333"},
    {"gosgd", "decentral / async / gossip: sum-weighted gossip to a random peer with probability p",
     "Blot et al. 2016, Gossip Training for Deep Learning (GoSGD)",
     "--optimization decentral --schedule async --exchange gossip:0.1"},
    {"tree-easgd", "decentral / async / tree:2: elastic exchanges with parent and children",
     "Zhang 2016, Distributed Stochastic Optimization for Deep Learning (PhD thesis, EASGD tree)",
     "--optimization decentral --schedule async --exchange tree:2 --tau-up 2 --tau-down 2"},
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
