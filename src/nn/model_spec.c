/* The model text format: one layer a line, "kind key=value ...", '#' starts
 * a comment. An optional first line "input shape=CxHxW" fixes the input
 * shape; otherwise it comes from the data. See docs/MODEL_FORMAT.md. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/nn.h"

static const char *BUILTIN_MLP =
    "# mlp: 784-512-256-10 with ReLU\n"
    "dense units=512\n"
    "relu\n"
    "dense units=256\n"
    "relu\n"
    "dense units=10\n";

static const char *BUILTIN_LENET =
    "# lenet (LeCun et al. 1998, the Caffe variant): 2 conv + 2 dense\n"
    "conv2d filters=20 kernel=5\n"
    "relu\n"
    "maxpool kernel=2\n"
    "conv2d filters=50 kernel=5\n"
    "relu\n"
    "maxpool kernel=2\n"
    "flatten\n"
    "dense units=500\n"
    "relu\n"
    "dense units=10\n";

static const char *BUILTIN_DEEP =
    "# deep: 8 dense layers, 11.4 M parameters, deep and wide enough for pipeline stages;\n"
    "# its widths cut into two stages of equal time (layers 0-2 | 3-7, counting that the\n"
    "# first layer's backward needs no input gradient), four within 15%\n"
    "dense units=1536\nrelu\n"
    "dense units=1536\nrelu\n"
    "dense units=1536\nrelu\n"
    "dense units=1536\nrelu\n"
    "dense units=1024\nrelu\n"
    "dense units=1024\nrelu\n"
    "dense units=512\nrelu\n"
    "dense units=10\n";

static void spec_defaults(layer_spec_t *l, layer_kind_t kind) {
  memset(l, 0, sizeof *l);
  l->kind = kind;
  l->stride = 0; /* 0 = default: 1 for conv2d, kernel for pools */
  l->rate = 0.5f;
  l->eps = 1e-5f;
  l->momentum = 0.1f;
}

/* ---- keys ------------------------------------------------------------------
 * Every key a layer line may carry, and which kinds take it. A key a kind
 * does not take is an error (a typo, or a layer of another kind meant), as
 * is a key given twice. */
enum {
  K_UNITS = 1 << 0, K_FILTERS = 1 << 1, K_KERNEL = 1 << 2, K_STRIDE = 1 << 3, K_PAD = 1 << 4,
  K_RATE = 1 << 5, K_EPS = 1 << 6, K_MOMENTUM = 1 << 7, K_NAME = 1 << 8, K_INPUT = 1 << 9,
  K_SPLIT = 1 << 10, K_HEADS = 1 << 11, K_VOCAB = 1 << 12, K_POSITIONS = 1 << 13,
  K_WITH = 1 << 14, K_TIE = 1 << 15, K_LAYERS = 1 << 16
};
static const char *const KEY_NAMES[] = {"units", "filters", "kernel", "stride", "pad",   "rate",
                                        "eps",   "momentum", "name",  "input",  "split",
                                        "heads", "vocab", "positions", "with", "tie", "layers"};
/* split=VALUE, indexed by file_split_t (UNSET has none). */
static const char *const SPLIT_NAMES[] = {"", "none", "column", "row", "data", "channels", "rows"};
#define NKEYS ((int)(sizeof KEY_NAMES / sizeof KEY_NAMES[0]))

/* Integer keys take 0 (pad) or 1 (the others) up to this. */
#define MAX_INT_KEY (1 << 24)
/* Each side of "input shape=CxHxW", and their product. */
#define MAX_SHAPE_SIDE 65536
#define MAX_SHAPE_SIZE (1 << 30)

static int kind_keys(layer_kind_t kind) {
  int all = K_NAME | K_INPUT;
  switch (kind) {
    case LAYER_DENSE: return all | K_UNITS | K_SPLIT;
    case LAYER_CONV2D:
    case LAYER_LOCAL2D: return all | K_FILTERS | K_KERNEL | K_STRIDE | K_PAD | K_SPLIT;
    case LAYER_MAXPOOL:
    case LAYER_AVGPOOL: return all | K_KERNEL | K_STRIDE;
    case LAYER_DROPOUT: return all | K_RATE;
    case LAYER_BATCHNORM: return all | K_EPS | K_MOMENTUM;
    case LAYER_EMBEDDING: return all | K_VOCAB | K_UNITS;
    case LAYER_POSEMBED: return all | K_POSITIONS;
    case LAYER_LAYERNORM: return all | K_EPS;
    case LAYER_ATTENTION: return all | K_HEADS;
    case LAYER_ADD: return all | K_WITH;
    case LAYER_LINEAR: return all | K_UNITS;
    case LAYER_LMHEAD: return all | K_VOCAB | K_TIE;
    case LAYER_LSTM: return all | K_UNITS | K_LAYERS;
    default: return all;
  }
}

static int key_index(const char *key) {
  for (int k = 0; k < NKEYS; k++)
    if (!strcmp(key, KEY_NAMES[k])) return k;
  return -1;
}

/* "units, name, input": the keys of a kind, for messages. */
static void list_keys(int mask, char *out, size_t cap) {
  out[0] = 0;
  for (int k = 0; k < NKEYS; k++)
    if (mask & (1 << k))
      snprintf(out + strlen(out), cap - strlen(out), "%s%s", out[0] ? ", " : "", KEY_NAMES[k]);
}

/* A whole decimal number in lo..hi: digits only (no sign, no spaces, no
 * suffix), checked against overflow. */
static int whole_number(const char *text, long lo, long hi, long *out) {
  long v = 0;
  if (!*text) return -1;
  for (const char *p = text; *p; p++) {
    if (*p < '0' || *p > '9') return -1;
    if (v > (hi - (*p - '0')) / 10) return -2; /* beyond hi: out of range */
    v = v * 10 + (*p - '0');
  }
  if (v < lo) return -2;
  *out = v;
  return 0;
}

/* Parses "key=value" into the spec; errors name file:line and say how to fix. */
static int apply_key(layer_spec_t *l, const model_spec_t *spec, int line, const char *key,
                     const char *val, int *seen) {
  const char *src = spec->source, *kind = layer_kind_name(l->kind);
  int k = key_index(key), mask = kind_keys(l->kind);
  char keys[160];
  list_keys(mask, keys, sizeof keys);
  if (k < 0)
    return dt_error("%s:%d: unknown key '%s' (%s takes %s)", src, line, key, kind, keys);
  if (!(mask & (1 << k)))
    return dt_error("%s:%d: %s takes no key '%s' (its keys: %s): remove it", src, line, kind, key,
                    keys);
  if (*seen & (1 << k))
    return dt_error("%s:%d: key '%s' given twice: keep one", src, line, key);
  *seen |= 1 << k;
  int bit = 1 << k;
  if (bit & (K_UNITS | K_FILTERS | K_KERNEL | K_STRIDE | K_PAD | K_HEADS | K_VOCAB | K_POSITIONS | K_LAYERS)) {
    long lo = bit == K_PAD ? 0 : 1, iv = 0;
    int rc = whole_number(val, lo, MAX_INT_KEY, &iv);
    if (rc != 0)
      return dt_error("%s:%d: %s=%s: %s (expected a whole number %ld..%d)", src, line, key, val,
                      rc == -1 ? "not a whole number" : "out of range", lo, MAX_INT_KEY);
    if (bit == K_UNITS) l->units = (int)iv;
    else if (bit == K_FILTERS) l->filters = (int)iv;
    else if (bit == K_KERNEL) l->kernel = (int)iv;
    else if (bit == K_STRIDE) l->stride = (int)iv;
    else if (bit == K_HEADS) l->heads = (int)iv;
    else if (bit == K_VOCAB) l->vocab = (int)iv;
    else if (bit == K_POSITIONS) l->positions = (int)iv;
    else if (bit == K_LAYERS) l->num_layers = (int)iv;
    else l->pad = (int)iv;
    return 0;
  }
  if (bit & (K_RATE | K_EPS | K_MOMENTUM)) {
    double lo = bit == K_EPS ? 1e-12 : 0, hi = bit == K_RATE ? 0.999 : 1;
    char *end;
    errno = 0;
    double fv = *val ? strtod(val, &end) : 0;
    if (!*val || *end || errno || !isfinite(fv) || fv < lo || fv > hi)
      return dt_error("%s:%d: %s=%s: expected a number in %g..%g", src, line, key, val, lo, hi);
    if (bit == K_RATE) l->rate = (float)fv;
    else if (bit == K_EPS) l->eps = (float)fv;
    else l->momentum = (float)fv;
    return 0;
  }
  if (bit == K_SPLIT) {
    for (int v = FILE_SPLIT_NONE; v <= FILE_SPLIT_ROWS; v++)
      if (!strcmp(val, SPLIT_NAMES[v])) {
        if (v == FILE_SPLIT_CHANNELS && l->kind != LAYER_CONV2D)
          return dt_error("%s:%d: split=channels splits a conv2d (use split=column)", src, line);
        if (v == FILE_SPLIT_ROWS && l->kind != LAYER_LOCAL2D)
          return dt_error("%s:%d: split=rows splits a local2d (a %s takes none, column, row or "
                          "data)", src, line, kind);
        if (l->kind == LAYER_LOCAL2D && v != FILE_SPLIT_ROWS && v != FILE_SPLIT_NONE)
          return dt_error("%s:%d: split=%s: a local2d splits by rows (split=rows or split=none)",
                          src, line, val);
        l->file_split = (file_split_t)v;
        return 0;
      }
    return dt_error("%s:%d: split=%s: expected none, column, row, data, channels (conv2d) or "
                    "rows (local2d)", src,
                    line, val);
  }
  if (bit == K_NAME) {
    if (!*val || strlen(val) >= sizeof l->name)
      return dt_error("%s:%d: name=%s: a name takes 1..%zu characters", src, line, val,
                      sizeof l->name - 1);
    for (int i = 0; i < spec->nlayers; i++)
      if (!strcmp(spec->layers[i].name, val))
        return dt_error("%s:%d: name '%s' is already used by line %d: pick another", src, line,
                        val, spec->layers[i].line);
    strcpy(l->name, val);
    return 0;
  }
  for (int i = 0; i < spec->nlayers; i++) /* K_INPUT, K_WITH, K_TIE: a node by name */
    if (!strcmp(spec->layers[i].name, val)) {
      if (bit == K_WITH) l->input2 = i;
      else if (bit == K_TIE) l->tie = i + 1;
      else l->input = i;
      return 0;
    }
  return dt_error("%s:%d: input=%s: no earlier layer is named '%s' (give one name=%s)", src, line,
                  val, val, val);
}

/* "input shape=CxHxW": exactly one key, three whole numbers. */
static int parse_input_shape(model_spec_t *spec, int line, char *save) {
  const char *src = spec->source;
  long v[3] = {0, 0, 0};
  int nshape = 0;
  for (char *kv = strtok_r(NULL, " \t\r", &save); kv; kv = strtok_r(NULL, " \t\r", &save)) {
    if (strncmp(kv, "shape=", 6) != 0)
      return dt_error("%s:%d: input takes only shape=CxHxW, not '%s'", src, line, kv);
    if (nshape++)
      return dt_error("%s:%d: shape given twice: keep one", src, line);
    char *text = kv + 6, *x1 = strchr(text, 'x'), *x2 = x1 ? strchr(x1 + 1, 'x') : NULL;
    int ok = x1 && x2 && !strchr(x2 + 1, 'x');
    if (ok) {
      *x1 = *x2 = 0;
      ok = whole_number(text, 1, MAX_SHAPE_SIDE, &v[0]) == 0 &&
           whole_number(x1 + 1, 1, MAX_SHAPE_SIDE, &v[1]) == 0 &&
           whole_number(x2 + 1, 1, MAX_SHAPE_SIDE, &v[2]) == 0;
      if (!ok) *x1 = *x2 = 'x';
    }
    if (!ok)
      return dt_error("%s:%d: shape=%s: expected CxHxW, three whole numbers 1..%d (e.g. "
                      "shape=1x28x28)", src, line, text, MAX_SHAPE_SIDE);
    if ((long long)v[0] * v[1] * v[2] > MAX_SHAPE_SIZE)
      return dt_error("%s:%d: shape=%ldx%ldx%ld: more than %d values per sample", src, line,
                      v[0], v[1], v[2], MAX_SHAPE_SIZE);
  }
  if (!nshape) return dt_error("%s:%d: expected 'input shape=CxHxW' (e.g. input shape=1x28x28)", src, line);
  spec->input = (shape_t){(int)v[0], (int)v[1], (int)v[2]};
  return 0;
}

/* Checks the keys each kind needs, and fills defaults that depend on others. */
static int check_required(layer_spec_t *l, const model_spec_t *spec) {
  const char *kind = layer_kind_name(l->kind);
  if (l->kind == LAYER_DENSE && l->units <= 0)
    return dt_error("%s:%d: %s needs units=N", spec->source, l->line, kind);
  if ((l->kind == LAYER_CONV2D || l->kind == LAYER_LOCAL2D) && (l->filters <= 0 || l->kernel <= 0))
    return dt_error("%s:%d: %s needs filters=N and kernel=K", spec->source, l->line, kind);
  if ((l->kind == LAYER_MAXPOOL || l->kind == LAYER_AVGPOOL) && l->kernel <= 0)
    return dt_error("%s:%d: %s needs kernel=K", spec->source, l->line, kind);
  if (l->stride == 0) l->stride = l->kind == LAYER_CONV2D || l->kind == LAYER_LOCAL2D ? 1 : l->kernel;
  const char *need = l->kind == LAYER_EMBEDDING && (l->vocab <= 0 || l->units <= 0) ? "vocab=V and units=C"
                     : l->kind == LAYER_POSEMBED && l->positions <= 0           ? "positions=P"
                     : l->kind == LAYER_ATTENTION && l->heads <= 0              ? "heads=H"
                     : l->kind == LAYER_ADD && l->input2 < 0                    ? "with=NAME (the residual stream)"
                     : l->kind == LAYER_LINEAR && l->units <= 0                 ? "units=N"
                     : l->kind == LAYER_LMHEAD && l->vocab <= 0                 ? "vocab=V"
                     : l->kind == LAYER_LSTM && l->units <= 0                   ? "units=H"
                                                                                : NULL;
  if (need) return dt_error("%s:%d: %s needs %s", spec->source, l->line, kind, need);
  return 0;
}

/* One layer line: the kind (first word) and its keys. */
static int parse_layer(model_spec_t *spec, int line, const char *word, char *save, int *cap) {
  layer_kind_t kind;
  if (layer_kind_parse(word, &kind) != 0) return dt_error_prefix("%s:%d: ", spec->source, line);
  if (spec->nlayers == *cap) {
    layer_spec_t *more = realloc(spec->layers, (size_t)*cap * 2 * sizeof *more);
    if (!more) return dt_error("%s:%d: out of memory", spec->source, line);
    spec->layers = more;
    *cap *= 2;
  }
  layer_spec_t *l = &spec->layers[spec->nlayers];
  spec_defaults(l, kind);
  l->line = line;
  l->index = spec->nlayers;
  l->input = spec->nlayers - 1;
  l->input2 = -1;
  l->num_layers = 1;
  int seen = 0;
  for (char *kv = strtok_r(NULL, " \t\r", &save); kv; kv = strtok_r(NULL, " \t\r", &save)) {
    char *eq = strchr(kv, '=');
    if (!eq) return dt_error("%s:%d: expected key=value, got '%s'", spec->source, line, kv);
    *eq = 0;
    DT_TRY(apply_key(l, spec, line, kv, eq + 1, &seen));
  }
  DT_TRY(check_required(l, spec));
  spec->nlayers++;
  return 0;
}

int model_spec_parse(const char *text, const char *source, model_spec_t *spec) {
  memset(spec, 0, sizeof *spec);
  snprintf(spec->source, sizeof spec->source, "%s", source);
  char *copy = strdup(text);
  int cap = 16, line = 0, rc = 0, input_line = 0;
  spec->layers = calloc((size_t)cap, sizeof *spec->layers);
  if (!copy || !spec->layers) {
    free(copy);
    free(spec->layers);
    spec->layers = NULL;
    return dt_error("%s: out of memory", source);
  }
  char *next;
  for (char *ln = copy; ln && rc == 0; ln = next) {
    line++;
    next = strchr(ln, '\n');
    if (next) *next++ = 0;
    char *hash = strchr(ln, '#');
    if (hash) *hash = 0;
    char *save = NULL, *word = strtok_r(ln, " \t\r", &save);
    if (!word) continue;
    if (strcmp(word, "input") != 0) {
      rc = parse_layer(spec, line, word, save, &cap);
    } else if (input_line) {
      rc = dt_error("%s:%d: a second 'input' line (the first is line %d): keep one", source, line,
                    input_line);
    } else if (spec->nlayers) {
      rc = dt_error("%s:%d: 'input' comes after a layer: move it before line %d", source, line,
                    spec->layers[0].line);
    } else {
      input_line = line;
      rc = parse_input_shape(spec, line, save);
    }
  }
  free(copy);
  if (rc == 0 && spec->nlayers == 0) rc = dt_error("%s: no layers", source);
  if (rc != 0) model_spec_free(spec);
  return rc;
}

/* gpt: GPT-2's shape on bytes (Radford et al. 2019; nanoGPT's layout),
 * `blocks` blocks of width 256 and 4 heads over 128 positions, an MLP of
 * 4 x the width, pre-norm residual blocks, the head tied to the token
 * embedding. gpt: 4 blocks, 3,257,856 parameters; gpt-deep: 8, 6,416,896. */
static int gpt_text(int blocks, char *buf, size_t cap) {
  const int C = 256, H = 4, T = 128, V = 256;
  size_t len = (size_t)snprintf(buf, cap,
                                "# gpt: %d blocks, %d heads, width %d, %d positions, bytes\n"
                                "embedding vocab=%d units=%d name=tok\n"
                                "posembed positions=%d name=x0\n", blocks, H, C, T, V, C, T);
  for (int b = 0; b < blocks && len < cap; b++)
    len += (size_t)snprintf(buf + len, cap - len,
                            "layernorm\nattention heads=%d\nadd with=x%d name=a%d\n"
                            "layernorm\nlinear units=%d\ngelu\nlinear units=%d\n"
                            "add with=a%d name=x%d\n", H, b, b, 4 * C, C, b, b + 1);
  if (len < cap) len += (size_t)snprintf(buf + len, cap - len, "layernorm\nlmhead vocab=%d tie=tok\n", V);
  return len < cap ? 0 : dt_error("gpt: the model text is too long");
}

/* lstm: a byte-level LSTM language model (Karpathy's char-rnn shape):
 * embedding 256 -> 2 stacked LSTM layers of 256 -> head; 1,183,744
 * parameters. */
static const char *BUILTIN_LSTM =
    "# lstm: bytes, 2 layers of 256\n"
    "embedding vocab=256 units=256\n"
    "lstm units=256 layers=2\n"
    "lmhead vocab=256\n";

int model_spec_builtin(const char *name, model_spec_t *spec) {
  if (!strcmp(name, "lstm")) return model_spec_parse(BUILTIN_LSTM, "builtin:lstm", spec);
  if (!strcmp(name, "gpt") || !strcmp(name, "gpt-deep")) {
    char text[8192], source[32];
    DT_TRY(gpt_text(strcmp(name, "gpt") ? 8 : 4, text, sizeof text));
    snprintf(source, sizeof source, "builtin:%s", name);
    return model_spec_parse(text, source, spec);
  }
  if (!strcmp(name, "mlp")) return model_spec_parse(BUILTIN_MLP, "builtin:mlp", spec);
  if (!strcmp(name, "lenet")) return model_spec_parse(BUILTIN_LENET, "builtin:lenet", spec);
  if (!strcmp(name, "deep")) return model_spec_parse(BUILTIN_DEEP, "builtin:deep", spec);
  return dt_error("unknown builtin model '%s' (expected mlp, lenet, deep, gpt, gpt-deep, lstm or a model file)", name);
}

int model_spec_load(const char *name_or_path, model_spec_t *spec) {
  if (!strchr(name_or_path, '/') && !strchr(name_or_path, '.'))
    return model_spec_builtin(name_or_path, spec);
  uint8_t *data;
  size_t len;
  if (file_read_all(name_or_path, 0, &data, &len) != 0) return -1;
  char *text = malloc(len + 1);
  if (!text) {
    free(data);
    return dt_error("out of memory");
  }
  memcpy(text, data, len);
  text[len] = 0;
  free(data);
  if (strlen(text) != len) {
    free(text);
    return dt_error("%s: not a text file (contains a NUL byte)", name_or_path);
  }
  int rc = model_spec_parse(text, name_or_path, spec);
  free(text);
  return rc;
}

void model_spec_free(model_spec_t *spec) {
  free(spec->layers);
  spec->layers = NULL;
  spec->nlayers = 0;
}
