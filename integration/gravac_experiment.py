"""The slow-network experiment of GraVAC (issue 7): four network namespaces
joined by a bridge, a tc tbf rate limit on both ends of every link, one rank
in each, MPI (and gloo, for the DDP references) over TCP between them.

For each configuration it trains integration/slow_network_mlp.py for the same
number of epochs, records time to a target accuracy (the dense run's final
accuracy minus 0.5 points), final accuracy, bytes sent per step, step time and
the CF per bucket over time, then writes docs/results/gravac.md and the PNG
plots (integration/plot_gravac.py). Needs root; cleans up the namespaces.

    sudo /usr/bin/python3 integration/gravac_experiment.py --rate 100mbit --epochs 3
    ... --only dense,gravac-topk      # a subset
"""

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
NETNS = os.path.join(HERE, "netns", "netns.sh")
MPIRUN = os.path.join(HERE, "netns", "mpirun_netns.sh")

# name -> (mode, extra environment)
CONFIGS = {
    "dense": ("terse", {"TERSE_COMPRESSION": "none"}),
    "fp16": ("terse", {"TERSE_COMPRESSION": "fp16"}),
    "topk-10": ("terse", {"TERSE_COMPRESSION": "topk", "TERSE_CF": "10"}),
    "topk-100": ("terse", {"TERSE_COMPRESSION": "topk", "TERSE_CF": "100"}),
    "topk-1000": ("terse", {"TERSE_COMPRESSION": "topk", "TERSE_CF": "1000"}),
    "dgc-100": ("terse", {"TERSE_COMPRESSION": "dgc", "TERSE_CF": "100"}),
    "accordion": ("terse", {"TERSE_COMPRESSION": "accordion",
                            "TERSE_ACCORDION_SWITCH_STEPS": "100"}),
    "gravac-topk": ("terse", {"TERSE_COMPRESSION": "gravac",
                              "TERSE_GRAVAC_COMPRESSOR": "topk",
                              "TERSE_GRAVAC_WINDOW": "50"}),
    "gravac-dgc": ("terse", {"TERSE_COMPRESSION": "gravac",
                             "TERSE_GRAVAC_COMPRESSOR": "dgc",
                             "TERSE_GRAVAC_WINDOW": "50"}),
    "ddp": ("ddp", {}),
    "ddp-powersgd-1": ("ddp-powersgd", {"POWERSGD_RANK": "1"}),
    "ddp-powersgd-4": ("ddp-powersgd", {"POWERSGD_RANK": "4"}),
}


def run_config(name, args, out_dir):
    mode, extra = CONFIGS[name]
    metrics = os.path.join(out_dir, f"{name}.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    env = dict(os.environ)
    env.update({k: v for k, v in extra.items() if k.startswith("TERSE_")})
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(ROOT, "bindings", "python"), HERE, env.get("PYTHONPATH", "")])
    env.update({"MASTER_ADDR": "10.77.0.1", "MASTER_PORT": str(29500 + len(name)),
                "GLOO_SOCKET_IFNAME": "eth0"})
    cmd = [MPIRUN, "--", "/usr/bin/python3", os.path.join(HERE, "slow_network_mlp.py"),
           "--mode", mode, "--epochs", str(args.epochs), "--eval-every", str(args.eval_every),
           "--metrics-out", metrics]
    if mode == "ddp-powersgd":
        cmd += ["--powersgd-rank", extra["POWERSGD_RANK"]]
    if args.max_steps:
        cmd += ["--max-steps", str(args.max_steps)]
    print(f"== {name}: {' '.join(cmd[2:])}", flush=True)
    start = time.time()
    result = subprocess.run(cmd, env=env, timeout=args.timeout)
    if result.returncode != 0:
        print(f"!! {name} failed with exit code {result.returncode}", flush=True)
        return None
    with open(metrics) as f:
        records = [json.loads(line) for line in f if line.strip()]
    print(f"   {name}: {time.time() - start:.0f} s, final accuracy "
          f"{records[-1]['test_accuracy']:.4f}", flush=True)
    return records


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", default="100mbit", help="tbf rate, or 'none'")
    parser.add_argument("--epochs", type=float, default=3)
    parser.add_argument("--eval-every", type=int, default=50)
    parser.add_argument("--max-steps", type=int, default=0)
    parser.add_argument("--only", default="", help="comma-separated config names")
    parser.add_argument("--timeout", type=int, default=3600, help="seconds per run")
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "results", "gravac"))
    args = parser.parse_args()

    names = args.only.split(",") if args.only else list(CONFIGS)
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        sys.exit(f"unknown configurations {unknown}; known: {list(CONFIGS)}")
    out_dir = os.path.join(args.out, args.rate)
    os.makedirs(out_dir, exist_ok=True)
    subprocess.run([NETNS, "up", "4", args.rate], check=True)
    try:
        for name in names:
            run_config(name, args, out_dir)
    finally:
        subprocess.run([NETNS, "down"], check=False)
    subprocess.run([sys.executable, os.path.join(HERE, "plot_gravac.py"),
                    "--results", args.out], check=True)


if __name__ == "__main__":
    main()
