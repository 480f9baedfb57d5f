#!/bin/sh
# dtrain plan --cluster (src/perf/cluster_file.c, project.c,
# src/report/plan_plot.c): the projection of mlp onto a described cluster
# at 8 ... 1024 workers (its table, its page rendered in headless Chromium
# with no console error and both charts), --net and --straggler taking
# effect, the option refusals, and bad input: malformed cluster files, more
# workers than the cluster has, a memory no batch fits: one line naming the
# key or constraint, exit 2.
. tests/lib.sh
C=docs/clusters/this-machine-4x8.json
PROJ="$DTRAIN plan --cluster $C --model mlp --batch 32"

# ---- the projection: 8 counts x 18 strategies, efficiencies in [0, 100]% (ps:1 at 1024: 0.0 as printed) --
$PROJ --project 8:1024 --plot "$TMP/p.html" >"$TMP/p.txt" 2>"$TMP/p.err"
check plan_project_runs grep -q "projected 8 worker counts x 18 strategies" "$TMP/p.err"
# mlp has fewer layers than a host's 8 ranks: no pipeline, said so on each row
check plan_project_no_pipeline sh -c "[ \$(grep -c 'gpipe.*fewer layers than a host' '$TMP/p.txt') -eq 8 ]"
check plan_project_table $PY -c "
import sys
rows = [l.split() for l in open('$TMP/p.txt') if l[:1].isdigit()]
eff = [float(w.rstrip('%')) for r in rows for w in r if w.endswith('%')]
counts = sorted({int(r[0]) for r in rows})
sys.exit(not (len(rows) == 144 and len(eff) == 127 and counts == [8, 16, 32, 64, 128, 256, 512, 1024]
              and all(0 <= e <= 100 for e in eff) and max(eff) > 50))"
# Megatron's 3-D grid: tp a divisor of a host's 8 ranks, pp >= 2 hosts, dp the rest (tp pp dp =
# the workers); at 8 (one host) no pp of 2 or more hosts, said so
check plan_project_grid $PY -c "
import re, sys
g = [l for l in open('$TMP/p.txt') if l[:1].isdigit() and '3d tp x pp=hosts x dp' in l]
ok = [re.search(r'tp=(\\d+) pp=(\\d+) dp=(\\d+) m=', l) for l in g[1:]]
sys.exit(not (len(g) == 8 and 'no pp of 2, 4' in g[0] and all(m and 8 % int(m.group(1)) == 0 and int(m.group(2)) >= 2
              and int(m.group(1)) * int(m.group(2)) * int(m.group(3)) == int(l.split()[0]) for m, l in zip(ok, g[1:]))))"
# the codecs: their CPU measured here (> 0), their bytes fewer than the ring's 2 (P - 1)/P of the gradients
check plan_project_codecs $PY -c "
import re, sys
head = open('$TMP/p.txt').readline()
grads = float(re.search(r'gradients ([0-9.e+]+) MB', head).group(1))
rows = [l for l in open('$TMP/p.txt') if l.startswith('8 ') and 'compress' in l]
got = [re.search(r'codec ([0-9.]+) ms, ([0-9.e+-]+) MB sent', l) for l in rows]
sys.exit(not (len(rows) == 4 and all(g and float(g.group(1)) > 0 and 0 < float(g.group(2)) < 2 * 7 / 8 * grads
                                     for g in got)))"
# the ring's efficiency falls as workers are added (its alpha term grows)
check plan_project_ring_falls $PY -c "
import sys
e = [float(l.split()[-2].rstrip('%')) for l in open('$TMP/p.txt') if l[:1].isdigit() and 'allreduce:ring' in l]
sys.exit(not (len(e) == 8 and e[0] > e[-1]))"
check plan_project_page sh -c "grep -q '<svg class=\"chart\"' '$TMP/p.html' && [ \$(grep -o 'class=\"swatch\"' '$TMP/p.html' | wc -l) -eq 18 ]"

# --net bandwidth= slows the link between hosts; --straggler its rank
ring_at() { awk -v n="$1" '$1 == n && $2 == "allreduce:ring" {print $3}' "$2"; }
$PROJ --project 64:64 >"$TMP/base.txt" 2>/dev/null
$PROJ --project 64:64 --net bandwidth=100Mbit >"$TMP/net.txt" 2>/dev/null
$PROJ --workers 64 --project 64:64 --straggler rank=9,slowdown=3 >"$TMP/slow.txt" 2>/dev/null
check plan_project_net_slows $PY -c "import sys; sys.exit(not ($(ring_at 64 "$TMP/net.txt") > 2 * $(ring_at 64 "$TMP/base.txt")))"
# Horovod's loop (--cycle-ms 5): each cycle's negotiation and wait cost mlp's short step
$PROJ --workers 64 --cycle-ms 5 >"$TMP/cycle.txt" 2>/dev/null
check plan_project_cycle_slows $PY -c "import sys; sys.exit(not ($(ring_at 64 "$TMP/cycle.txt") > $(ring_at 64 "$TMP/base.txt")))"
check plan_project_ssp_staleness grep -q "ps:1 ssp:3 (expected) .*staleness 63 expected" "$TMP/base.txt"
check plan_project_straggler_slows $PY -c "import sys; sys.exit(not ($(ring_at 64 "$TMP/slow.txt") > $(ring_at 64 "$TMP/base.txt")))"

# ---- the page in a browser: no console error, both charts -------------------
if command -v chromium >/dev/null 2>&1; then
  CHROME="chromium --headless --disable-gpu --no-sandbox --user-data-dir=$TMP/chromium \
    --enable-logging=stderr --v=0"
  printf '<html><body><script>console.error("e2e-probe")</script></body></html>' >"$TMP/bad.html"
  $CHROME --dump-dom "file://$TMP/bad.html" >/dev/null 2>"$TMP/bad.err"
  check plan_browser_console_probe grep -q ':CONSOLE.*e2e-probe' "$TMP/bad.err"
  $CHROME --dump-dom "file://$TMP/p.html" >"$TMP/dom" 2>"$TMP/chrome.err"
  check plan_browser_no_console_errors sh -c "! grep -q ':CONSOLE' '$TMP/chrome.err'"
  check plan_browser_renders_charts sh -c "[ \$(grep -o '<svg class=\"chart\"' '$TMP/dom' | wc -l) -eq 2 ] && [ \$(grep -o '<polyline' '$TMP/dom' | wc -l) -eq 36 ]"
else
  fail plan_browser "chromium is not installed (scripts/install-deps.sh installs it)"
fi

# ---- options ------------------------------------------------------------------
expect_error plan_project_needs_cluster 2 "give --cluster FILE" -- $DTRAIN plan --project 8:64 --model mlp
expect_error plan_project_no_colon 2 "give FROM:TO" -- $PROJ --project 8
expect_error plan_project_backwards 2 "FROM <= TO" -- $PROJ --project 64:8
expect_error plan_project_not_a_number 2 "project" -- $PROJ --project 8:lots
expect_error plan_plot_html 2 "ending in .html" -- $PROJ --project 8:64 --plot "$TMP/p.txt"
expect_error plan_classes_range 2 "classes" -- $PROJ --workers 8 --classes 1
expect_error plan_bucket_zero 2 "bucket-mb" -- $PROJ --workers 8 --bucket-mb 0
expect_error plan_project_no_json 2 "json is the search's option" -- $PROJ --project 8:16 --json "$TMP/p.jsonl"
# --memory-per-rank bounds each strategy's rank: mlp's tp rank (its blocks) fits 2 MB, the
# data-parallel rank does not; 0.1 MB fits nothing
$PROJ --project 16:16 --memory-per-rank 2 >"$TMP/mem.txt" 2>/dev/null
check plan_project_memory_per_rank sh -c "grep -q 'allreduce:ring .*does not fit: [0-9.]* MiB over' '$TMP/mem.txt' && grep 'tp=host' '$TMP/mem.txt' | grep -vq 'does not fit'"
expect_error plan_project_memory_nothing_fits 2 "--memory-per-rank: .*gives 0.1 MiB" -- $PROJ --project 16:16 --memory-per-rank 0.1
expect_error plan_cycle_range 2 "cycle-ms: 2000 is out of range" -- $PROJ --workers 8 --cycle-ms 2000
expect_error plan_cycle_not_a_number 2 "cycle-ms" -- $PROJ --workers 8 --cycle-ms soon
expect_error plan_cycle_needs_cluster 2 "cycle-ms projects onto a cluster" -- $DTRAIN plan --cycle-ms 5 --model mlp
expect_error plan_cycle_not_predict 2 "cycle-ms is not one of its options" -- $DTRAIN plan --predict --cluster $C --cycle-ms 5 --model mlp
echo "not a page" >"$TMP/notmine.html"
expect_error plan_plot_keeps_others_file 2 "notmine.html" -- $PROJ --workers 8 --plot "$TMP/notmine.html"
check plan_plot_left_it grep -q "not a page" "$TMP/notmine.html"

# ---- --predict --cluster: one configuration simulated on the file's hosts ----
SMALL="$TMP/small"
make_small_fashion "$SMALL" 256 64
PRED="$DTRAIN plan --predict --data $SMALL --batch 16 --max-steps 4 --epochs 1 --exchange allreduce:ring --workers 16"
field() { $PY -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())[sys.argv[2]])' "$1" "$2"; }
$PRED >"$TMP/here.plan" 2>/dev/null
$PRED --cluster $C >"$TMP/file.plan" 2>/dev/null
$PRED --cluster $C --net bandwidth=100Mbit >"$TMP/file_net.plan" 2>/dev/null
sed 's/"speed": 1/"speed": 0.25/' $C >"$TMP/slow.json"
$PRED --cluster "$TMP/slow.json" >"$TMP/file_slow.plan" 2>/dev/null
# 16 ranks on this machine's 2 cores, against a core each on the file's hosts
check plan_predict_cluster_own_cores $PY -c "import sys; sys.exit(not ($(field "$TMP/file.plan" step_sec) < $(field "$TMP/here.plan" step_sec)))"
check plan_predict_cluster_net $PY -c "import sys; sys.exit(not ($(field "$TMP/file_net.plan" step_sec) > 5 * $(field "$TMP/file.plan" step_sec)))"
# a codec's bytes in the projection are the exchange's own formula, as --predict's describe_step counts them
$DTRAIN plan --cluster $C --model mlp --batch 16 --project 8:8 >"$TMP/codec8.txt" 2>/dev/null
for codec in fp16 powersgd:4; do
  $PRED --workers 8 --compress $codec >"$TMP/codec.plan" 2>/dev/null
  check "plan_project_codec_bytes_$codec" $PY -c "
import re, sys
row = [l for l in open('$TMP/codec8.txt') if 'compress $codec ' in l][0]
mb = float(re.search(r'([0-9.e+-]+) MB sent', row).group(1))
sys.exit(not abs(mb * 1e6 - $(field "$TMP/codec.plan" bytes_sent_per_step)) <= 5e-4 * mb * 1e6)"
done
check plan_predict_cluster_speed $PY -c "import sys; sys.exit(not ($(field "$TMP/file_slow.plan" compute_sec) > 2.5 * $(field "$TMP/file.plan" compute_sec)))"
expect_error plan_predict_cluster_projected 2 "groups\[0\] is projected" -- $PRED --cluster docs/clusters/horovod-p100.json
expect_error plan_predict_cluster_too_many 2 "has 1024 ranks" -- $PRED --cluster $C --workers 2000
expect_error plan_predict_cluster_not_project 2 "--project is not one of its options" -- $PRED --cluster $C --project 8:16
# the file's ranks run as mpi: -np 3 cannot hold a grid of 2, refused as
# train refuses it (the search's rows say so), not a step with an idle rank
expect_error plan_predict_cluster_grid_fits_ranks 2 "mpirun -np 3 and --pp 2: workers = dp x pp" -- $PRED --cluster $C --workers 3 --pp 2
expect_error describe_mpi_grid_fits_ranks 1 "mpirun -np 3 and --tp 2: workers = dp x pp x tp" -- $DTRAIN describe --data $SMALL --batch 16 --comm mpi --workers 3 --tp 2

# ---- bad input: one line naming the key or constraint, exit 2 ---------------
expect_error plan_cluster_more_ranks 2 "has 1024 ranks (128 hosts); give at most 1024" -- $PROJ --project 8:2048
expect_error plan_cluster_more_workers 2 "has 1024 ranks" -- $PROJ --workers 1500
expect_error plan_cluster_missing_file 2 "no-such.json" -- $DTRAIN plan --cluster "$TMP/no-such.json" --workers 8
bad() { # NAME NEEDLE SED-EXPRESSION: the example file edited, refused naming the key
  sed "$3" "$C" >"$TMP/$1.json"
  expect_error "plan_cluster_$1" 2 "$2" -- $DTRAIN plan --cluster "$TMP/$1.json" --model mlp --workers 8
}
bad unknown_key 'unknown key "groups\[0\].gpus_per_host"' 's/"ranks_per_host"/"gpus_per_host"/'
bad bad_value 'key "inter.bandwidth": expected a number' 's/"bandwidth": 1.25e9/"bandwidth": "10GbE"/'
bad missing_key 'key "groups\[0\].hosts" is missing' 's/"hosts": 128, //'
bad zero_speed 'key "groups\[0\].device.speed"' 's/"speed": 1/"speed": 0/'
bad format 'key "format"' 's/dtrain-cluster 1/dtrain-cluster 9/'
bad truncated 'does not end\|expected' '$d'
# a memory no batch fits, and one where a smaller batch would
sed 's/"memory_per_rank": 1073741824/"memory_per_rank": 1000/' "$C" >"$TMP/tiny.json"
expect_error plan_cluster_memory_nothing_fits 2 "memory_per_rank: .*no batch fits" -- \
  $DTRAIN plan --cluster "$TMP/tiny.json" --model mlp --project 8:8
sed 's/"memory_per_rank": 1073741824/"memory_per_rank": 8000000/' "$C" >"$TMP/small.json"
expect_error plan_cluster_memory_smaller_batch 2 "memory_per_rank: .*a batch of at most [0-9]* fits" -- \
  $DTRAIN plan --cluster "$TMP/small.json" --model mlp --project 8:8 --batch 4096

# ---- the search on the file's hosts (devices measured here): every candidate --
SEARCH="$DTRAIN plan --cluster $C --data $SMALL --batch 16 --max-steps 4 --epochs 1"
$SEARCH --workers 8 --json "$TMP/s8.jsonl" >"$TMP/s8.txt" 2>"$TMP/s8.err"
check plan_cluster_search_ranks $PY -c "
import json
rows = [json.loads(l) for l in open('$TMP/s8.jsonl')]
ranked = [r for r in rows if r['table'] == 'strategies' and r['predicted']]
opts = ' '.join(r['options'] for r in ranked)
# the grids, the servers, the decentralized methods and the pipelines all predicted on the file's hosts
assert len(ranked) >= 15 and '--pp 2 --tp 2' in opts and 'ps:2' in opts and 'local-sgd' in opts, opts
assert all(r['plan']['step_sec'] > 0 for r in ranked)"
check plan_cluster_search_grid_simulated sh -c "! grep -q 'wait for each other' '$TMP/s8.txt'"
# the file's ranks are processes on its hosts: planned as --comm mpi runs
# them (shared memory's row refused, saying why); with --comm local, 16
# workers span two of its hosts, which shared memory cannot
check plan_cluster_search_as_mpi grep -q "exchange shared needs shared memory" "$TMP/s8.txt"
# PipeDream's partition cuts where the hosts' NIC carries the activations
# (the file's inter link), not on links without limit
check plan_cluster_search_pipedream_on_the_nic grep -q "^PipeDream's partition over 8 machines (stage replication, 2a/B at each cut, B [0-9.e+]* Gbit/s, the hosts' NIC)" "$TMP/s8.txt"
$SEARCH --workers 16 --comm local >"$TMP/s16.txt" 2>/dev/null
check plan_cluster_search_shared_one_host grep -q "exchange shared: the step's 16 ranks span 2 hosts" "$TMP/s16.txt"
# the file's memory per rank bounds the candidates (each row says by how much)
expect_error plan_cluster_search_memory 2 "no candidate fits the memory per rank of $TMP/tiny.json" -- \
  $DTRAIN plan --cluster "$TMP/tiny.json" --data $SMALL --batch 16 --max-steps 4 --workers 8
