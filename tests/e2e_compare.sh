#!/bin/sh
# dtrain compare: a small comparison across the three families, its
# report checked against itself and against the runs' metrics
# (tests/compare_check.py), a preset that fails at run time shown with its
# error while the others run, the page rendered in headless Chromium with
# no console error, and each refusal of bad input.
. tests/lib.sh
SMALL="--data synthetic --workers 2 --batch 32 --max-steps 24 --epochs 3"

# ---- a comparison: allreduce, parameter server, decentralized; 2 seeds each
out=$TMP/cmp
$DTRAIN compare --presets horovod,petuum,gosgd --runs 2 --target-acc 0.12 $SMALL \
  --trace --trace-steps 1:3 --out "$out" >"$TMP/table" 2>"$TMP/log"; rc=$?
check compare_runs [ "$rc" -eq 0 ]
check compare_writes_report [ -s "$out/report.html" -a -s "$out/report.json" -a -s "$out/runs/petuum-seed2.jsonl" ]
check compare_table_on_stdout sh -c "grep -q '^horovod ' '$TMP/table' && grep -q '^petuum ' '$TMP/table' && grep -q '^gosgd ' '$TMP/table' && ! grep -q '^epoch ' '$TMP/table'"
check compare_table_predicted_beside_measured sh -c "grep -Eq '^petuum +predicted [0-9.]+ ms a step, measured [0-9.]+ ms' '$TMP/table'"
$PY tests/compare_check.py "$out" compare
check compare_trace_per_run $PY tests/trace_check.py "$out/runs/gosgd-seed2.trace.json" steps 1:3

# ---- pipelines: the stages' idle waits are the bubble, their own part of the
# time split and their own clause, not exposed communication (distbelief-mp:
# one micro-batch, so each of its 2 stages idles about half the step)
bout=$TMP/cmp-bubble
$DTRAIN compare --presets distbelief-mp,gpipe --data synthetic --workers 2 --max-steps 8 \
  --out "$bout" >/dev/null 2>"$TMP/log"
check compare_pipeline_bubble_labelled $PY -c "
import json
r = json.load(open('$bout/report.json'))
p = {x['name']: x for x in r['presets']}
d = p['distbelief-mp']
assert d['bubble_sec'] > 0 and d['bubble_sec'] <= d['comm_exposed_sec'], d
kinds = {v['kind']: v['value'] for v in d['verdict']}
assert 'bubble' in kinds and kinds['bubble'] >= 0.1, d['verdict']
exposed = d['comm_exposed_sec'] - d['bubble_sec']
assert 'exposed' not in kinds or abs(kinds['exposed'] - exposed / d['train_sec']) < 1e-6, d['verdict']
assert 'pipeline bubble' in open('$bout/report.html').read()
"
$PY tests/compare_check.py "$bout" compare_bubble

# ---- a preset that fails at run time: shown with its error, the others run
printf 'dense units=10\n' >"$TMP/one.model"
fout=$TMP/cmp-fail
$DTRAIN compare --presets gpipe,horovod --model "$TMP/one.model" --data synthetic --workers 2 \
  --max-steps 4 --out "$fout" >"$TMP/table" 2>"$TMP/log"; rc=$?
check compare_failed_run_exit_1 [ "$rc" -eq 1 ]
check compare_failed_run_shown $PY -c "
import json, sys
r = json.load(open('$fout/report.json'))
p = {x['name']: x for x in r['presets']}
g, h = p['gpipe'], p['horovod']
assert g['ok'] == 0 and '--pp 2' in g['error'], g
assert h['ok'] == 1 and h['error'] is None, h
assert g['verdict'][0]['text'].startswith('failed: ')
page = open('$fout/report.html').read()
assert 'gpipe (seed 1) failed: ' in page and 'the model has 1 layer that' in page
"
$PY tests/compare_check.py "$fout" compare_failed

# ---- a run that diverges is a failed run, with its error
dout=$TMP/cmp-div
$DTRAIN compare --presets horovod --data synthetic --workers 2 --max-steps 8 --lr 1e6 \
  --max-loss 3 --out "$dout" >/dev/null 2>&1; rc=$?
check compare_diverged_shown sh -c "[ $rc -eq 1 ] && grep -Eq 'diverged|loss is NaN' '$dout/report.json' && grep -q 'failed: ' '$dout/report.html'"

# ---- --time-budget: every run ends at its first epoch end past the budget
make_small_fashion "$TMP/small" 2000 500
bout=$TMP/cmp-budget
$DTRAIN compare --presets horovod,local-sgd,gosgd --data "$TMP/small" --workers 2 --epochs 500 \
  --time-budget 1 --out "$bout" >/dev/null 2>"$TMP/log"; rc=$?
check compare_time_budget $PY -c "
import json
r = json.load(open('$bout/report.json'))
for run in r['runs']:
    ep = [m for m in run['metrics'] if m['event'] == 'epoch']
    done = [m for m in run['metrics'] if m['event'] == 'done']
    assert run['ok'] and done and 1 <= len(ep) < 500, (run['preset'], len(ep))
    assert done[0]['total_sec'] >= 0.9, (run['preset'], done[0]['total_sec'])  # rank 0's clock from before the first epoch
" && [ "$rc" -eq 0 ]
expect_error compare_time_budget_unused 2 "preset petuum: option --time-budget: not used" -- \
  $DTRAIN compare --presets horovod,petuum --time-budget 5 --out "$TMP/none"

# ---- SIGINT during the second run: no report, the first run's metrics kept
iout=$TMP/cmp-int
$DTRAIN compare --presets horovod,local-sgd --data synthetic --workers 2 --epochs 1 \
  --out "$iout" >/dev/null 2>"$TMP/int.err" &
pid=$!
for i in $(seq 1 600); do
  grep -q '"event":"done"' "$iout/runs/horovod-seed1.jsonl" 2>/dev/null && [ -e "$iout/runs/local-sgd-seed1.jsonl" ] && break
  sleep 0.1
done
kill -INT $pid; wait $pid; rc=$?
check compare_interrupted_keeps_runs sh -c "[ $rc -eq 130 ] && [ ! -e '$iout/report.html' ] && [ ! -e '$iout/report.json' ] && grep -q '\"event\":\"done\"' '$iout/runs/horovod-seed1.jsonl' && grep -q 'no report written' '$TMP/int.err'"

# ---- the page in a browser: no console error, a screenshot --------------------
if command -v chromium >/dev/null 2>&1; then
  CHROME="chromium --headless --disable-gpu --no-sandbox --user-data-dir=$TMP/chromium \
    --enable-logging=stderr --v=0"
  # the check finds console errors: a page with one is caught
  printf '<html><body><script>console.error("e2e-probe")</script></body></html>' >"$TMP/bad.html"
  $CHROME --dump-dom "file://$TMP/bad.html" >/dev/null 2>"$TMP/bad.err"
  check browser_console_probe grep -q ':CONSOLE.*e2e-probe' "$TMP/bad.err"
  $CHROME --dump-dom "file://$out/report.html" >"$TMP/dom" 2>"$TMP/chrome.err"
  check browser_no_console_errors sh -c "! grep -q ':CONSOLE' '$TMP/chrome.err'"
  check browser_renders_charts sh -c "[ \$(grep -o '<svg class=\"chart\"' '$TMP/dom' | wc -l) -ge 6 ]"
  $CHROME --hide-scrollbars --window-size=1200,1800 --screenshot="$TMP/shot.png" \
    "file://$out/report.html" >/dev/null 2>&1
  check browser_screenshot $PY -c "
import struct, sys
b = open('$TMP/shot.png', 'rb').read()
assert b[:8] == b'\x89PNG\r\n\x1a\n' and len(b) > 20000, len(b)
w, h = struct.unpack('>II', b[16:24])
assert (w, h) == (1200, 1800), (w, h)
"
else
  fail browser_report "chromium is not installed (scripts/install-deps.sh installs it)"
fi

# ---- bad input: one line each, exit 2, nothing written --------------------------
expect_error compare_unknown_preset 2 "unknown preset 'nope' (known: horovod, pytorch-ddp" -- \
  $DTRAIN compare --presets horovod,nope $SMALL --out "$TMP/none"
check compare_unknown_preset_writes_nothing [ ! -e "$TMP/none" ]
expect_error compare_needs_presets 2 "--presets A,B,... is required" -- $DTRAIN compare $SMALL
expect_error compare_twice 2 "'horovod' is named twice" -- $DTRAIN compare --presets horovod,horovod
expect_error compare_option_unused 2 "preset horovod: option --tau: not used" -- \
  $DTRAIN compare --presets local-sgd,horovod --tau 2 $SMALL --out "$TMP/none"
expect_error compare_bad_target 2 "option --target-acc" -- \
  $DTRAIN compare --presets horovod --target-acc 85 --out "$TMP/none"
expect_error compare_no_preset_option 2 "compare takes --presets" -- \
  $DTRAIN compare --preset horovod --out "$TMP/none"
expect_error compare_no_metrics_option 2 "option --metrics: compare writes" -- \
  $DTRAIN compare --presets horovod --metrics "$TMP/m.jsonl" --out "$TMP/none"
expect_error compare_no_mpi 2 "option --comm mpi: compare runs its presets in this process" -- \
  $DTRAIN compare --presets horovod --comm mpi --out "$TMP/none"
mkdir -p "$TMP/other" && echo keep >"$TMP/other/notes.txt"
expect_error compare_foreign_folder 2 "is not an earlier report (add --force" -- \
  $DTRAIN compare --presets horovod $SMALL --out "$TMP/other"
check compare_foreign_folder_untouched sh -c "[ \$(ls -A '$TMP/other') = notes.txt ]"
$DTRAIN compare --presets horovod --data synthetic --max-steps 2 --out "$TMP/other" --force >/dev/null 2>&1
check compare_force_writes sh -c "[ -s '$TMP/other/report.html' ] && grep -q keep '$TMP/other/notes.txt'"
$DTRAIN compare --presets horovod --data synthetic --max-steps 2 --out "$TMP/other" >/dev/null 2>&1
check compare_earlier_report_reused [ $? -eq 0 ]
echo x >"$TMP/afile"
expect_error compare_out_is_file 2 "exists and is not a folder" -- \
  $DTRAIN compare --presets horovod --out "$TMP/afile"
expect_error compare_out_unwritable 2 "cannot create the folder" -- \
  $DTRAIN compare --presets horovod --out /proc/dtrain-compare
