"""C and C++ source as code only, for the source checks in scripts/
(check-portable-kernels.py, check-layering.py)."""
import re


def strip(text):
    """Comments, string and character literals (raw strings included)
    replaced by spaces: every line and column stays where it was. A quote
    after a letter or digit is a digit separator (1'000), not a literal."""
    out, i, n = [], 0, len(text)
    blank = lambda a, b: re.sub(r"[^\n]", " ", text[a:b])
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(blank(i, j)); i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(blank(i, j)); i = j
        elif c == "R" and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")) and \
                re.match(r'R"([^(\s]{0,16})\(', text[i:i + 20]):
            delim = re.match(r'R"([^(\s]{0,16})\(', text[i:i + 20])
            end = ")" + delim.group(1) + '"'
            j = text.find(end, i + len(delim.group(0)))
            j = n if j < 0 else j + len(end)
            out.append(blank(i, j)); i = j
        elif c == '"' or (c == "'" and not (i > 0 and text[i - 1].isalnum())):
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(blank(i, j)); i = j
        else:
            out.append(c); i += 1
    return "".join(out)
