# Usage: python3 scripts/dsn_memory_study.py [OUT_DIR], from the repository root, tessera built in release.
# Memory study: peak RSS per rank, one source + K targets (K = 1, 4, 7), single process vs one domain per rank.
import json, os, subprocess, sys
T = os.environ.get("TESSERA", "target/release/tessera")
base = open("presets/dsn_shapes7.toml").read()
out_root = sys.argv[1] if len(sys.argv) > 1 else "out/dsn-memory-study"
head, *doms = base.split("[[domains]]")
sets = ["model.image_size=128", "train.batch=16", "train.epochs=1", "train.steps_per_epoch=3",
        "train.train_images=32", "train.test_images=16"]
print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
for k in (1, 4, 7):
    os.makedirs(out_root, exist_ok=True)
    path = f"{out_root}/preset_{k}_targets.toml"
    open(path, "w").write(head + "".join("[[domains]]" + d for d in doms[: k + 1]))
    for ranks in (1, k + 1):
        out = f"{out_root}/targets{k}_ranks{ranks}"
        cmd = [T, "train", path, "--quiet", "--out", out] + sum((["--set", s] for s in sets), [])
        if ranks > 1:
            cmd += ["--ranks", str(ranks)]
        subprocess.run(cmd, check=True)
        d = json.load(open(out + "/train.json"))
        peaks = [r["peak_rss_bytes"] / 2**20 for r in d["per_rank"]]
        print(f"targets {k} ranks {ranks}: peak RSS per rank MiB max {max(peaks):.0f} (all {[round(p) for p in peaks]})", flush=True)
print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
