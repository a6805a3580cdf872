#!/usr/bin/env python3
"""The house rules a reader can walk (issue 59), checked on the sources.

* no planner header over 450 lines, no kernel source over 600;
* no function body in the planner over 120 lines;
* the lower-bound terms live in include/dcpp/planner/bounds/.

Usage: check_house.py SOURCE_ROOT. Prints every breach with its file, line and size; exits 1
when there is one. Function bodies are found by brace matching on the source with comments and
string literals blanked: a `{` whose head (the text since the last `;`, `{` or `}`) ends in a
parameter list and is no class, namespace or control statement opens a function body; lambdas
count within the function that holds them.
"""
import pathlib
import re
import sys

PLANNER_HEADER_LINES = 450
KERNEL_SOURCE_LINES = 600
PLANNER_FUNCTION_LINES = 120


def blank_comments_and_strings(src):
    out = []
    i, n = 0, len(src)
    while i < n:
        if src.startswith('//', i):
            j = src.find('\n', i)
            j = n if j < 0 else j
            out.append(' ' * (j - i))
            i = j
        elif src.startswith('/*', i):
            j = src.find('*/', i)
            j = n if j < 0 else j + 2
            out.append(re.sub(r'[^\n]', ' ', src[i:j]))
            i = j
        elif src[i] == '"' or (src[i] == "'" and not (i > 0 and src[i - 1].isalnum())):
            quote = src[i]
            j = i + 1
            while j < n and src[j] != quote:
                j += 2 if src[j] == '\\' else 1
            out.append(quote + re.sub(r'[^\n]', ' ', src[i + 1:j]) + quote)
            i = j + 1
        else:
            out.append(src[i])
            i += 1
    return ''.join(out)


FUNCTION_HEAD = re.compile(r'\)\s*(const|noexcept|override|final|mutable|->[^{]*|requires[^{]*|\s)*$')
NOT_A_FUNCTION = re.compile(r'\b(struct|class|namespace|enum|union)\b')
CONTROL = re.compile(r'\b(if|for|while|switch|catch)\s*\(')
TEMPLATE_HEAD = re.compile(r'template\s*<[^{;]*?>\s*(?=\[|\w)')


def function_lengths(path):
    """(lines, first line, name) of every outermost function body of the file."""
    text = blank_comments_and_strings(path.read_text())
    stack, found, last = [], [], 0
    for m in re.finditer(r'[{};]', text):
        at = m.start()
        if m.group() == '{':
            head = TEMPLATE_HEAD.sub('', text[last:at])
            is_function = (FUNCTION_HEAD.search(head) is not None
                           and NOT_A_FUNCTION.search(head) is None
                           and CONTROL.search(head.split('\n')[-1]) is None)
            inside = any(f for f, _, _ in stack)
            line = text.count('\n', 0, at) + 1
            name = re.findall(r'([~\w:]+)\s*\(', head)
            stack.append((is_function and not inside, line, name[-1] if name else '?'))
        elif m.group() == '}' and stack:
            is_function, line, name = stack.pop()
            if is_function:
                found.append((text.count('\n', 0, at) + 1 - line + 1, line, name))
        last = at + 1
    return found


def main():
    root = pathlib.Path(sys.argv[1])
    breaches = []
    planner = root / 'include/dcpp/planner'
    for f in sorted(planner.rglob('*.hpp')):
        rel = f.relative_to(root)
        lines = f.read_text().count('\n')
        if lines > PLANNER_HEADER_LINES:
            breaches.append(f'{rel}: {lines} lines, the limit for a planner header is '
                            f'{PLANNER_HEADER_LINES}')
        for length, line, name in function_lengths(f):
            if length > PLANNER_FUNCTION_LINES:
                breaches.append(f'{rel}:{line}: {name} is {length} lines, the limit for a '
                                f'planner function is {PLANNER_FUNCTION_LINES}')
    for f in sorted((root / 'kernels').rglob('*')):
        if f.suffix in ('.hpp', '.cuh', '.cu', '.cpp'):
            lines = f.read_text().count('\n')
            if lines > KERNEL_SOURCE_LINES:
                breaches.append(f'{f.relative_to(root)}: {lines} lines, the limit for a kernel '
                                f'source is {KERNEL_SOURCE_LINES}')
    bound_terms = ['forced_round_bound', 'gap_bound', 'slowest_round_bounds',
                   'budget_bound_terms', 'least_area_knapsack']
    for f in sorted(planner.rglob('*.hpp')):
        if 'bounds' in f.parts:
            continue
        text = blank_comments_and_strings(f.read_text())
        for term in bound_terms:
            # a definition starts a line: `class term`, or a return type then `term(`
            if re.search(rf'^(class|struct)\s+{term}\b|^\w[\w:<>, ]*\s+{term}\(', text, re.M):
                breaches.append(f'{f.relative_to(root)}: defines {term}, a bound term, outside '
                                'include/dcpp/planner/bounds/')
    for b in breaches:
        print(b)
    print(f'{len(breaches)} breaches of the house rules' if breaches else 'house rules hold')
    return 1 if breaches else 0


if __name__ == '__main__':
    sys.exit(main())
