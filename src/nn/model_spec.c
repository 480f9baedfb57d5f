/* The model text format: one layer a line, "kind key=value ...", '#' starts
 * a comment. An optional first line "input shape=CxHxW" fixes the input
 * shape; otherwise it comes from the data. See docs/MODEL_FORMAT.md. */
#include <ctype.h>
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

static void spec_defaults(layer_spec_t *l, layer_kind_t kind) {
  memset(l, 0, sizeof *l);
  l->kind = kind;
  l->stride = 0; /* 0 = default: 1 for conv2d, kernel for pools */
  l->rate = 0.5f;
  l->eps = 1e-5f;
  l->momentum = 0.1f;
}

/* Parses "key=value" into the spec; errors name file:line and the key. */
static int apply_key(layer_spec_t *l, const model_spec_t *spec, int line, const char *key,
                     const char *val, const model_spec_t *sofar) {
  long iv;
  double fv;
  char opt[400];
  snprintf(opt, sizeof opt, "%s:%d: %s", spec->source, line, key);
  if (!strcmp(key, "units") || !strcmp(key, "filters") || !strcmp(key, "kernel") ||
      !strcmp(key, "stride") || !strcmp(key, "pad")) {
    if (parse_int(key, val, !strcmp(key, "pad") ? 0 : 1, 1 << 24, &iv) != 0)
      return dt_error_prefix("%s:%d: ", spec->source, line);
    if (!strcmp(key, "units")) l->units = (int)iv;
    else if (!strcmp(key, "filters")) l->filters = (int)iv;
    else if (!strcmp(key, "kernel")) l->kernel = (int)iv;
    else if (!strcmp(key, "stride")) l->stride = (int)iv;
    else l->pad = (int)iv;
    return 0;
  }
  if (!strcmp(key, "rate") || !strcmp(key, "eps") || !strcmp(key, "momentum")) {
    double lo = !strcmp(key, "eps") ? 1e-12 : 0, hi = !strcmp(key, "rate") ? 0.999 : 1;
    if (parse_float(key, val, lo, hi, &fv) != 0) return dt_error_prefix("%s:%d: ", spec->source, line);
    if (!strcmp(key, "rate")) l->rate = (float)fv;
    else if (!strcmp(key, "eps")) l->eps = (float)fv;
    else l->momentum = (float)fv;
    return 0;
  }
  if (!strcmp(key, "name")) {
    if (strlen(val) >= sizeof l->name) return dt_error("%s: name too long", opt);
    strcpy(l->name, val);
    return 0;
  }
  if (!strcmp(key, "input")) {
    for (int i = 0; i < sofar->nlayers; i++)
      if (!strcmp(sofar->layers[i].name, val)) {
        l->input = i;
        return 0;
      }
    return dt_error("%s: no earlier layer is named '%s'", opt, val);
  }
  return dt_error("%s:%d: unknown key '%s' (expected units, filters, kernel, stride, pad, rate, "
                  "eps, momentum, name, input)",
                  spec->source, line, key);
}

static int parse_input_shape(const model_spec_t *spec, int line, char *args) {
  model_spec_t *s = (model_spec_t *)spec;
  int c, h, w;
  char *eq = strstr(args, "shape=");
  if (!eq || sscanf(eq + 6, "%dx%dx%d", &c, &h, &w) != 3 || c <= 0 || h <= 0 || w <= 0)
    return dt_error("%s:%d: expected 'input shape=CxHxW' with positive sizes", spec->source, line);
  s->input = (shape_t){c, h, w};
  return 0;
}

/* Checks the keys each kind needs, and fills defaults that depend on others. */
static int check_required(layer_spec_t *l, const model_spec_t *spec) {
  const char *kind = layer_kind_name(l->kind);
  if (l->kind == LAYER_DENSE && l->units <= 0)
    return dt_error("%s:%d: %s needs units=N", spec->source, l->line, kind);
  if (l->kind == LAYER_CONV2D && (l->filters <= 0 || l->kernel <= 0))
    return dt_error("%s:%d: %s needs filters=N and kernel=K", spec->source, l->line, kind);
  if ((l->kind == LAYER_MAXPOOL || l->kind == LAYER_AVGPOOL) && l->kernel <= 0)
    return dt_error("%s:%d: %s needs kernel=K", spec->source, l->line, kind);
  if (l->stride == 0) l->stride = l->kind == LAYER_CONV2D ? 1 : l->kernel;
  return 0;
}

int model_spec_parse(const char *text, const char *source, model_spec_t *spec) {
  memset(spec, 0, sizeof *spec);
  snprintf(spec->source, sizeof spec->source, "%s", source);
  char *copy = strdup(text);
  if (!copy) return dt_error("out of memory");
  int cap = 16, line = 0, rc = 0;
  spec->layers = calloc((size_t)cap, sizeof *spec->layers);
  char *next;
  for (char *ln = copy; ln && rc == 0; ln = next) {
    line++;
    next = strchr(ln, '\n');
    if (next) *next++ = 0;
    char *hash = strchr(ln, '#');
    if (hash) *hash = 0;
    char *save2 = NULL, *word = strtok_r(ln, " \t\r", &save2);
    if (!word) continue;
    if (!strcmp(word, "input")) {
      rc = parse_input_shape(spec, line, save2 ? save2 : (char *)"");
      continue;
    }
    layer_kind_t kind;
    if (layer_kind_parse(word, &kind) != 0) {
      rc = dt_error_prefix("%s:%d: ", source, line);
      break;
    }
    if (spec->nlayers == cap) {
      cap *= 2;
      layer_spec_t *more = realloc(spec->layers, (size_t)cap * sizeof *more);
      if (!more) { rc = dt_error("out of memory"); break; }
      spec->layers = more;
    }
    layer_spec_t *l = &spec->layers[spec->nlayers];
    spec_defaults(l, kind);
    l->line = line;
    l->index = spec->nlayers;
    l->input = spec->nlayers - 1;
    for (char *kv = strtok_r(NULL, " \t\r", &save2); kv && rc == 0; kv = strtok_r(NULL, " \t\r", &save2)) {
      char *eq = strchr(kv, '=');
      if (!eq) {
        rc = dt_error("%s:%d: expected key=value, got '%s'", source, line, kv);
        break;
      }
      *eq = 0;
      rc = apply_key(l, spec, line, kv, eq + 1, spec);
    }
    if (rc == 0) rc = check_required(l, spec);
    if (rc == 0) spec->nlayers++;
  }
  free(copy);
  if (rc == 0 && spec->nlayers == 0) rc = dt_error("%s: no layers", source);
  if (rc != 0) model_spec_free(spec);
  return rc;
}

int model_spec_builtin(const char *name, model_spec_t *spec) {
  if (!strcmp(name, "mlp")) return model_spec_parse(BUILTIN_MLP, "builtin:mlp", spec);
  if (!strcmp(name, "lenet")) return model_spec_parse(BUILTIN_LENET, "builtin:lenet", spec);
  return dt_error("unknown builtin model '%s' (expected mlp, lenet or a model file)", name);
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
