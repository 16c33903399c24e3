#!/usr/bin/env python3
"""Strict checker of the Prometheus text exposition format (0.0.4) for the
output of `spcollctl metrics`: used when promtool is not installed.
Exit 0 when valid; otherwise print every problem with its line number."""
import math
import re
import sys

NAME = re.compile(r'[a-zA-Z_:][a-zA-Z0-9_:]*$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')
SAMPLE = re.compile(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$')
TYPES = {'counter', 'gauge', 'histogram', 'summary', 'untyped'}


def labels_of(text, err):
    if not text:
        return {}
    body, out, pos = text[1:-1], {}, 0
    while pos < len(body):
        m = LABEL.match(body, pos)
        if not m:
            err(f'bad label syntax at "{body[pos:]}"')
            return out
        if m.group(1) in out:
            err(f'label {m.group(1)} repeated')
        out[m.group(1)] = m.group(2)
        pos = m.end()
        if pos < len(body):
            if body[pos] != ',':
                err('labels must be separated by commas')
                return out
            pos += 1
    return out


def family_of(name, types):
    for suffix in ('_bucket', '_sum', '_count'):
        base = name[: -len(suffix)]
        if name.endswith(suffix) and types.get(base) == 'histogram':
            return base
    return name


def check_histograms(hist, err):
    for (fam, key), series in hist.items():
        les = [(float(le), v) for le, v in series['buckets']]
        if not les or not math.isinf(les[-1][0]):
            err(f'{fam}{key}: no +Inf bucket')
            continue
        if [le for le, _ in les] != sorted(le for le, _ in les):
            err(f'{fam}{key}: buckets not in increasing le order')
        if any(b[1] > c[1] for b, c in zip(les, les[1:])):
            err(f'{fam}{key}: bucket counts not cumulative')
        if series.get('count') != les[-1][1]:
            err(f'{fam}{key}: _count differs from the +Inf bucket')
        if 'sum' not in series:
            err(f'{fam}{key}: no _sum')


def check(lines):
    problems, types, helps, done, hist = [], {}, set(), set(), {}
    current = None
    for n, line in enumerate(lines, 1):
        def err(msg, n=n):
            problems.append(f'line {n}: {msg}')
        if line.startswith('# HELP ') or line.startswith('# TYPE '):
            parts = line.split(' ', 3)
            if len(parts) < 4 or not NAME.match(parts[2]):
                err('malformed HELP/TYPE line')
                continue
            name = parts[2]
            if line.startswith('# TYPE '):
                if parts[3] not in TYPES:
                    err(f'unknown type {parts[3]}')
                if name in types:
                    err(f'second TYPE for {name}')
                if parts[3] == 'counter' and not name.endswith('_total'):
                    err(f'counter {name} does not end in _total')
                types[name] = parts[3]
            else:
                if name in helps:
                    err(f'second HELP for {name}')
                helps.add(name)
            continue
        if line.startswith('#') or not line:
            err('stray comment or empty line')
            continue
        m = SAMPLE.match(line)
        if not m:
            err(f'malformed sample "{line}"')
            continue
        name, labels = m.group(1), labels_of(m.group(2), err)
        try:
            value = float(m.group(3))
        except ValueError:
            err(f'value "{m.group(3)}" is not a number')
            continue
        fam = family_of(name, types)
        if fam not in types:
            err(f'sample of {name} before its TYPE')
        if fam != current:
            if fam in done:
                err(f'samples of {fam} are not contiguous')
            if current:
                done.add(current)
            current = fam
        if types.get(fam) == 'counter' and value < 0:
            err(f'counter {name} is negative')
        if types.get(fam) == 'histogram':
            key = tuple(sorted((k, v) for k, v in labels.items() if k != 'le'))
            series = hist.setdefault((fam, key), {'buckets': []})
            if name.endswith('_bucket'):
                if 'le' not in labels:
                    err('bucket without le')
                else:
                    series['buckets'].append((labels['le'], value))
            else:
                series[name.rsplit('_', 1)[1]] = value
    for fam in types:
        if fam not in helps:
            problems.append(f'{fam}: TYPE without HELP')
    check_histograms(hist, lambda msg: problems.append(msg))
    return problems


def main():
    text = open(sys.argv[1]).read() if len(sys.argv) > 1 else sys.stdin.read()
    if not text.endswith('\n'):
        print('output does not end with a newline')
        return 1
    problems = check(text[:-1].split('\n'))
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
