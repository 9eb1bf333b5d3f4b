"""The guest family: guest workloads run only on the vm-* targets and host workloads only on
the others (noted, never mounted), and a quick run in real guests where QEMU, busybox, the
guest kernel and the Ansible tree are already here (tests never download them)."""

import base64
import gzip
import json
import shutil
from pathlib import Path

import pytest

from memofs_bench import inputs, trees
from memofs_bench.targets import make_target  # before guest_targets, which it imports last
from memofs_bench.guest_targets import virtiofsd_binary  # noqa: I001
from memofs_bench.runner import Runner
from memofs_bench.vm import VM_SCRIPTS, GuestSetup
from memofs_bench.workloads import Metric, Part, Workload, guest, guest_fio, registry

KERNEL = "6.19"    # the guest kernel CI's VM tests fetch


@pytest.mark.smoke
def test_guest_workloads_and_host_targets_do_not_mix(tmp_path):
    in_guest = Workload("in-guest", "", "", [], [Metric("time", "t", "s", False)],
                        [Part("p", ("time",), lambda ctx: iter(()))],
                        guest=lambda p: GuestSetup("no-such-kernel"))
    doc = Runner([registry()["stat-missing"], in_guest], ["tmpfs", "vm-tmpfs"], 1,
                 tmp_path, quick=True, quiet=True).execute()
    notes = {(e["target"], e["workload"]): e["message"] for e in doc["errors"]}
    assert "runs in a guest" in notes[("tmpfs", "in-guest")]
    assert "runs on the host" in notes[("vm-tmpfs", "stat-missing")]
    assert "no-such-kernel" in notes[("vm-tmpfs", "in-guest")]
    assert not [s for s in doc["samples"] if s["target"] == "vm-tmpfs"]


@pytest.mark.smoke
def test_the_migrate_family_runs_on_mig_targets_only(tmp_path):
    doc = Runner([registry()["migrate"], registry()["stat-missing"]], ["tmpfs", "mig-memofs"],
                 1, tmp_path, quick=True, quiet=True,
                 overrides={"migrate": {"sizes": "0"}}).execute()
    notes = {(e["target"], e["workload"]): e["message"] for e in doc["errors"]}
    assert "on the mig-* targets only" in notes[("tmpfs", "migrate")]
    assert "runs on the host" in notes[("mig-memofs", "stat-missing")]
    measured = {(s["target"], s["metric"].split("/")[0]) for s in doc["samples"]}
    assert measured <= {("tmpfs", "stat-missing"), ("mig-memofs", "migrate")}, measured


def test_the_plan_checks_what_the_tree_holds():
    t = guest.Tree(Path("/x.tar"), trees.Manifest("d", {"r/a": 3, "r/b": 4},
                                                       grep={guest.GREP: 7}), "r")
    steps = {s.label: s for s in guest.plan(guest.WORKLOAD.param_values({}, True), t)}
    assert list(steps) == guest.LABELS
    assert steps["find"].want == "2" and steps["grep"].want == "7"
    assert steps["read-1M"].cold and "cmp -n 4194304" in steps["read-1M"].check


def _ready() -> str | None:
    missing = [t for t in ("qemu-system-x86_64", "busybox", "cpio") if not shutil.which(t)]
    if missing:
        return f"{', '.join(missing)} not installed"
    kdir = Path.home() / ".cache" / "memofs-vm" / "kernels" / KERNEL
    if not (kdir / ".package").is_file():
        return f"guest kernel {KERNEL} not fetched ({VM_SCRIPTS}/fetch.sh {KERNEL})"
    if not (inputs.inputs_dir() / "downloads" / inputs.ANSIBLE.filename).is_file():
        return (f"the Ansible sdist is not in {inputs.inputs_dir()} (bench/memofs-bench fetch "
                "real downloads it; tests never do)")
    return None


@pytest.mark.smoke
def test_guest_quick_in_real_guests(tmp_path):
    why = _ready()
    if why:
        pytest.skip(why)
    targets = ["vm-tmpfs", "vm-memofs", "vm-memofs-pt:--cache=always"]
    if virtiofsd_binary():
        targets.append("vm-virtiofsd:--cache=always")
    doc = Runner([registry()["guest"]], targets, 1, tmp_path, quick=True, quiet=True,
                 overrides={"guest": {"kernel": KERNEL}}).execute()
    assert doc["errors"] == []
    for t in targets:
        got = [s["param"] for s in doc["samples"]
               if s["metric"] == "guest/time" and s["target"] == t]
        assert got == guest.LABELS, t
    untar = [s for s in doc["samples"] if s["metric"] == "guest/requests"
             and s["param"] == "untar"]
    assert [s["target"] for s in untar] == ["vm-memofs", "vm-memofs-pt:--cache=always"]
    assert all(s["detail"]["ops"]["CREATE"] == 400 for s in untar)
    assert not list(tmp_path.glob("**/*.sock"))


def test_guest_fio_runs_psync_at_depth_1_and_reads_its_json_back():
    p = guest_fio.WORKLOAD.param_values({}, False)
    assert guest_fio.labels(p)[:2] == ["randread-qd1-1cpu", "randread-qd16-1cpu"]
    assert guest_fio.labels(p)[-1] == "randwrite-qd16-2cpu"
    assert "--ioengine=psync" in guest_fio.job(p, "randread", 1)
    assert "--ioengine=io_uring --direct=1" in guest_fio.job(p, "randwrite", 16)
    doc = {"jobs": [{"read": {"iops": 5.0}}]}
    out = base64.encodebytes(gzip.compress(json.dumps(doc).encode())).decode()
    assert guest_fio.result(out) == doc


def test_a_vm_target_without_a_workloads_guest_is_refused(tmp_path):
    t = make_target("vm-memofs", tmp_path)
    with pytest.raises(Exception, match="only workloads made for a guest"):
        t.mount()
