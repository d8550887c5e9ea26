#!/usr/bin/env python3
"""Checks that x86-64 programs carry no instruction beyond a baseline (x86-64-v3: AVX2, FMA,
BMI1/2, F16C, MOVBE, LZCNT) outside the functions chosen at run time for wider CPUs.

A program built for the build machine (-march=native on an AVX-512 CPU) runs on the GPU machine
only if that machine's processor has every instruction it uses: one SIGILL and the first GPU
run is lost. scripts/gpu-bundle.sh runs this on every program it packs.

    isa_check.py [--allow REGEX] PROGRAM...

Reads `objdump -d -C` (demangled): each instruction belongs to the function whose label comes
before it. An instruction is beyond x86-64-v3 when it names an AVX-512 register (zmm, the
mask registers k0-k7, xmm16-31 / ymm16-31), uses masking ({%k..}, {z}) or embedded broadcast
({1toN}), or is an AVX-512, AMX, AVX-VNNI, SHA, AES, PCLMUL, GFNI, ADX or RDRAND/RDSEED
instruction (or a few rarer ones: CLWB, MOVDIRI, SERIALIZE, WAITPKG, RDPID, XSAVEC). Functions
whose demangled name matches --allow (default: our attention kernels
compiled for AVX-512, sbp::cpu::avx512::, which attention_dispatch.cpp runs only on CPUs that
have AVX-512) are skipped. Exit 1 with the first offending instructions of each function,
0 when clean.
"""
import argparse
import re
import subprocess
import sys

# Registers and operand forms only EVEX (AVX-512) encodes.
EVEX_OPERANDS = re.compile(
    r"%zmm\d|%k[0-7]\b|%[xy]mm(1[6-9]|2\d|3[01])\b|\{%k[0-7]\}|\{z\}|\{1to\d+\}|\{[rs]ae\}|\{r[nduz]-sae\}")
# Mnemonics beyond x86-64-v3 (prefixes of them: objdump's AT&T suffixes follow some).
MNEMONICS = re.compile(
    r"^(k(add|and|andn|mov|not|or|ortest|shiftl|shiftr|test|unpck|xnor|xor)[bwdq]"
    r"|vpternlog|vperm[it]2|vpcompress|vpexpand|vcompressp|vexpandp"
    r"|vmovdqu(8|16|32|64)|vmovdqa(32|64)"
    r"|vbroadcast[if](32x|64x)|vextract[if](32x|64x)|vinsert[if](32x|64x)|vshuf[if](32x|64x)"
    r"|valign[dq]|vpmov(s|us)?(qd|qw|qb|dw|db|wb)|vpmov[bwdq]2m|vpmovm2[bwdq]"
    r"|vcvtt?p[sd]2u|vcvtu|vcvtt?s[sd]2usi|vcvtt?p[sd]2[u]?qq|vcvt[u]?qq2p"
    r"|vrange|vreduce|vgetexp|vgetmant|vscalef|vfixupimm|vrcp14|vrsqrt14|vrcp28|vrsqrt28|vexp2"
    r"|vpro[lr][vdq]|vpsraq|vpsravq|vpabsq|vpmaxsq|vpmaxuq|vpminsq|vpminuq|vpmullq"
    r"|vfpclass|vpconflict|vplzcnt|vpopcnt|vpshufbitqmb|vpmultishiftqb|vpermb|vpermw|vpermi2b"
    r"|vpshld|vpshrd|vpdpbusd|vpdpwssd|vdpbf16ps|vcvtne2ps2bf16|vcvtneps2bf16|vdpbusd"
    r"|vp4dpwssd|v4fmadd|vp2intersect|vpcmp[u]?[bwdq]\b|vcmp.*k"
    r"|ldtilecfg|sttilecfg|tilerelease|tilezero|tileload|tilestore|tdp"
    r"|sha1|sha256|aes|vaes|pclmul|vpclmul|gf2p8|vgf2p8|adcx|adox|rdrand|rdseed"
    r"|clwb|clflushopt|movdiri|movdir64b|serialize|umwait|tpause|umonitor|rdpid|xsavec|xsaves)")
# Prefixes objdump prints before a mnemonic; the instruction is the token after them.
PREFIXES = {"lock", "rep", "repz", "repnz", "repe", "repne", "notrack", "bnd", "data16", "data32",
            "addr32", "cs", "ds", "es", "fs", "gs", "ss", "xacquire", "xrelease", "{vex}",
            "{vex3}", "{disp8}", "{disp32}", "{load}", "{store}", "rex", "rex.w"}

LABEL = re.compile(r"^[0-9a-f]+ <(.*)>:$")
INSN = re.compile(r"^\s+[0-9a-f]+:\s+(?:[0-9a-f]{2} )*\s*(\S+)\s*(.*)$")


def beyond_baseline(mnemonic, operands):
    # objdump prints prefixes such as {vex}, {evex} or notrack before some mnemonics: an EVEX
    # encoding is AVX-512 whatever the instruction; the others are skipped to reach it.
    tokens = (mnemonic + " " + operands).split()
    while tokens and tokens[0] in PREFIXES:
        tokens.pop(0)
    if not tokens or tokens[0] == "(bad)":
        return False
    if tokens[0] == "{evex}":
        return True
    return bool(MNEMONICS.match(tokens[0]) or EVEX_OPERANDS.search(" ".join(tokens[1:])))


def check(program, allow):
    # Streamed: a test program's disassembly is hundreds of megabytes of text.
    proc = subprocess.Popen(["objdump", "-d", "-C", "--no-show-raw-insn", program],
                            stdout=subprocess.PIPE, text=True, errors="replace")
    bad = {}  # function -> first offending lines
    function = "?"
    for line in proc.stdout:
        line = line.rstrip("\n")
        m = LABEL.match(line)
        if m:
            function = m.group(1)
            continue
        m = INSN.match(line)
        if not m or allow.search(function):
            continue
        mnemonic, operands = m.group(1), m.group(2)
        if beyond_baseline(mnemonic, operands):
            lines = bad.setdefault(function, [])
            if len(lines) < 3:
                lines.append(line.strip())
    if proc.wait() != 0:
        raise SystemExit(f"isa_check: objdump failed on {program}")
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--allow", default=r"sbp::cpu::avx512::",
                    help="regex of demangled function names that may use any instruction")
    ap.add_argument("programs", nargs="+")
    args = ap.parse_args()
    allow = re.compile(args.allow)
    failed = False
    for p in args.programs:
        bad = check(p, allow)
        if bad:
            failed = True
            print(f"isa_check: {p}: {len(bad)} functions use instructions beyond x86-64-v3:")
            for fn, lines in list(bad.items())[:10]:
                print(f"  {fn}")
                for l in lines:
                    print(f"      {l}")
            if len(bad) > 10:
                print(f"  ... and {len(bad) - 10} more functions")
        else:
            print(f"isa_check: {p}: x86-64-v3 only (outside {args.allow})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
