#!/usr/bin/env python3
"""The report of ./dev.sh gpu: the devices, every gpu-suite test with its result and time, and
the kernel benchmark's rows, as one JSON file (written to a temporary file, then renamed) and a
table on the terminal.

usage: gpu_report.py --devices TXT --tests TESTLOG_JSON --bench BENCH_JSON --out REPORT_JSON
"""
import argparse
import json
import os
import sys
import tempfile


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--devices', required=True)
    ap.add_argument('--tests', required=True)
    ap.add_argument('--bench', required=True)
    ap.add_argument('--out', required=True)
    a = ap.parse_args()
    report = {'devices': [], 'tests': [], 'bench': None}
    try:
        with open(a.devices) as f:
            report['devices'] = [line.strip() for line in f if line.strip()]
    except OSError as e:
        print(f'gpu_report: cannot read --devices {a.devices}: {e.strerror}', file=sys.stderr)
        return 1
    try:
        if os.path.exists(a.tests):
            with open(a.tests) as f:
                for line in f:
                    t = json.loads(line)
                    if 'gpu' in t.get('suite', []) or t.get('name', '').startswith('gpu /'):
                        report['tests'].append({'name': t['name'], 'result': t['result'],
                                                'seconds': round(t.get('duration', 0.0), 2)})
        if os.path.exists(a.bench):
            with open(a.bench) as f:
                report['bench'] = json.load(f)
    except (OSError, ValueError, KeyError) as e:
        print(f'gpu_report: cannot read the test log or the benchmark: {e}', file=sys.stderr)
        return 1
    print()
    for d in report['devices']:
        print(d)
    print(f"\n{'test':<64} {'result':>8} {'seconds':>9}")
    for t in report['tests']:
        print(f"{t['name'][:64]:<64} {t['result']:>8} {t['seconds']:>9.1f}")
    counts = {}
    for t in report['tests']:
        counts[t['result']] = counts.get(t['result'], 0) + 1
    print(', '.join(f'{n} {r}' for r, n in sorted(counts.items())))
    if report['bench']:
        print(f"\n{'kernel':<36} {'ms':>9} {'rate':>10} {'unit':>8} {'of peak':>8} {'predicted':>10}")
        for r in report['bench']['rows']:
            predicted = f"{r['predicted']:.0f}" if r['predicted'] > 0 else '-'
            print(f"{r['kernel']:<36} {r['ms']:>9.3f} {r['rate']:>10.1f} {r['unit']:>8} "
                  f"{r['of_peak_percent']:>7.1f}% {predicted:>10}")
    directory = os.path.dirname(os.path.abspath(a.out))
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix='.gpu_report.')
    except OSError as e:
        print(f'gpu_report: cannot write --out {a.out}: {e.strerror}', file=sys.stderr)
        return 1
    try:
        with os.fdopen(fd, 'w') as f:
            json.dump(report, f, indent=1)
            f.write('\n')
        os.replace(tmp, a.out)
    except OSError as e:
        os.unlink(tmp)
        print(f'gpu_report: cannot write --out {a.out}: {e.strerror}', file=sys.stderr)
        return 1
    print(f'\nwrote {a.out}')
    return 0 if all(t['result'] in ('OK', 'SKIP', 'EXPECTEDFAIL') for t in report['tests']) else 1


if __name__ == '__main__':
    sys.exit(main())
