/* dtrain presets: every named system, the axes it sets and its source. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "dtrain/train.h"

int cmd_presets(int argc, char **argv) {
  if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
    puts("usage: dtrain presets\n\nLists each preset: the taxonomy axes it sets, the paper or "
         "system it comes from,\nand the options it stands for. Use one with "
         "'dtrain train --preset NAME'; options\ngiven after it override the preset's.");
    return 0;
  }
  if (argc > 1) {
    fprintf(stderr, "dtrain presets: unexpected argument '%s'\n", argv[1]);
    return 2;
  }
  int n;
  const preset_t *p = preset_list(&n);
  for (int i = 0; i < n; i++)
    printf("%-14s %s\n%-14s source:  %s\n%-14s options: %s\n\n", p[i].name, p[i].axes, "",
           p[i].source, "", p[i].options);
  return 0;
}
