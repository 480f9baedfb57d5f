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
