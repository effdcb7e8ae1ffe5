#!/usr/bin/env python3
"""Unit tests of ps_launch's pure functions (no process is started)."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ps_launch as L  # noqa: E402


class NodelistTest(unittest.TestCase):
    def test_plain_and_ranges(self):
        self.assertEqual(L.expand_nodelist("node[01-03],other"),
                         ["node01", "node02", "node03", "other"])
        self.assertEqual(L.expand_nodelist("a"), ["a"])
        self.assertEqual(L.expand_nodelist("a,b , c"), ["a", "b", "c"])

    def test_lists_inside_brackets(self):
        self.assertEqual(L.expand_nodelist("n[1,3-4,10]"), ["n1", "n3", "n4", "n10"])

    def test_padding_kept_across_widths(self):
        self.assertEqual(L.expand_nodelist("gpu[098-101]"),
                         ["gpu098", "gpu099", "gpu100", "gpu101"])
        self.assertEqual(L.expand_nodelist("x[8-10]"), ["x8", "x9", "x10"])

    def test_several_bracket_groups_and_suffix(self):
        self.assertEqual(L.expand_nodelist("r[1-2]-n[1,3].ib"),
                         ["r1-n1.ib", "r1-n3.ib", "r2-n1.ib", "r2-n3.ib"])

    def test_commas_between_groups(self):
        self.assertEqual(L.expand_nodelist("a[1-2],b[5],c"), ["a1", "a2", "b5", "c"])

    def test_errors(self):
        for bad in ("n[1-2", "n]1[", "n[a-b]", "n[3-1]", "n[1,,2]"):
            with self.assertRaises(L.LaunchError, msg=bad):
                L.expand_nodelist(bad)


class SlurmTest(unittest.TestCase):
    def test_counts(self):
        self.assertEqual(L.slurm_counts(5), (2, 2))
        self.assertEqual(L.slurm_counts(4), (1, 2))
        self.assertEqual(L.slurm_counts(6, num_servers=1), (1, 4))
        self.assertEqual(L.slurm_counts(6, num_workers=1), (4, 1))
        self.assertEqual(L.slurm_counts(4, 1, 2), (1, 2))
        with self.assertRaises(L.LaunchError):
            L.slurm_counts(5, 1, 1)
        with self.assertRaises(L.LaunchError):
            L.slurm_counts(2)
        with self.assertRaises(L.LaunchError):
            L.slurm_counts(4, num_servers=3)

    def test_roles(self):
        got = [L.slurm_role(p, 2, 3) for p in range(6)]
        self.assertEqual(got, [("scheduler", 0), ("server", 0), ("server", 1),
                               ("worker", 0), ("worker", 1), ("worker", 2)])
        with self.assertRaises(L.LaunchError):
            L.slurm_role(6, 2, 3)

    def test_plan_from_environment(self):
        env = {"SLURM_PROCID": "3", "SLURM_NTASKS": "5", "SLURM_JOB_ID": "12345",
               "SLURM_NODELIST": "node[07-09]"}
        role, rank, s, w, root, port = L.slurm_plan(env)
        self.assertEqual((role, rank, s, w, root), ("worker", 0, 2, 2, "node07"))
        self.assertEqual(port, 20000 + 12345 % 30000)
        # Every task computes the same root and port on its own.
        for p in range(5):
            env["SLURM_PROCID"] = str(p)
            self.assertEqual(L.slurm_plan(env)[4:], ("node07", port))
        self.assertEqual(L.slurm_plan(env, port=9000)[5], 9000)

    def test_job_nodelist_preferred_and_missing(self):
        env = {"SLURM_PROCID": "0", "SLURM_NTASKS": "3", "SLURM_JOBID": "1",
               "SLURM_JOB_NODELIST": "b1", "SLURM_NODELIST": "a1"}
        self.assertEqual(L.slurm_plan(env)[4], "b1")
        with self.assertRaises(L.LaunchError):
            L.slurm_plan({"SLURM_NTASKS": "3"})
        with self.assertRaises(L.LaunchError):
            L.slurm_plan({"SLURM_PROCID": "x", "SLURM_NTASKS": "3", "SLURM_NODELIST": "a"})


class EnvTest(unittest.TestCase):
    def test_server(self):
        env, unset = L.build_env("server", 1, 2, 3, "10.0.0.2", 8123, node_host="10.0.0.5")
        self.assertEqual(env, {
            "DMLC_ROLE": "server", "DMLC_NUM_SERVER": "2", "DMLC_NUM_WORKER": "3",
            "DMLC_PS_ROOT_URI": "10.0.0.2", "DMLC_PS_ROOT_PORT": "8123",
            "DMLC_NODE_HOST": "10.0.0.5", "DMLC_RANK": "1"})
        self.assertEqual(unset, [])

    def test_scheduler_has_no_rank(self):
        env, _ = L.build_env("scheduler", 0, 1, 1, "::1", 1)
        self.assertNotIn("DMLC_RANK", env)
        self.assertNotIn("DMLC_NODE_HOST", env)

    def test_no_rank(self):
        env, _ = L.build_env("worker", 4, 1, 8, "h", 1, set_rank=False)
        self.assertNotIn("DMLC_RANK", env)

    def test_van_and_extra(self):
        env, unset = L.build_env("worker", 0, 1, 1, "h", 1, van="tcp",
                                 extra={"PS_VERBOSE": "1", "DMLC_RANK": "7"})
        self.assertEqual(env["DMLC_PS_VAN_TYPE"], "tcp")
        self.assertEqual(env["PS_VERBOSE"], "1")
        self.assertEqual(env["DMLC_RANK"], "7")  # the user's --env wins
        self.assertEqual(sorted(unset), ["DMLC_ENABLE_RDMA", "DMLC_ENABLE_UCX"])
        env, unset = L.build_env("worker", 0, 1, 1, "h", 1, van="ucx")
        self.assertEqual(env["DMLC_ENABLE_UCX"], "1")
        self.assertEqual(unset, ["DMLC_ENABLE_RDMA"])
        _, unset = L.build_env("worker", 0, 1, 1, "h", 1, van="tcp",
                               extra={"DMLC_ENABLE_RDMA": "ibverbs"})
        self.assertEqual(unset, ["DMLC_ENABLE_UCX"])

    def test_bad_role(self):
        with self.assertRaises(L.LaunchError):
            L.build_env("joint", 0, 1, 1, "h", 1)

    def test_env_assignments(self):
        self.assertEqual(L.parse_env_assignments(["A=1", "B=x=y", "C="]),
                         {"A": "1", "B": "x=y", "C": ""})
        for bad in (["A"], ["=1"]):
            with self.assertRaises(L.LaunchError):
                L.parse_env_assignments(bad)


class PlanTest(unittest.TestCase):
    def test_local(self):
        self.assertEqual(L.local_plan(2, 1),
                         [("scheduler", 0), ("server", 0), ("server", 1), ("worker", 0)])

    def test_labels(self):
        self.assertEqual(L.process_label("scheduler", 0), "scheduler")
        self.assertEqual(L.process_label("worker", 3), "worker 3")

    def test_hostfile_parse(self):
        text = "# comment\nh1 scheduler\n\nh2 server  # trailing\nu@h3\n"
        self.assertEqual(L.parse_hostfile(text),
                         [("h1", "scheduler"), ("h2", "server"), ("u@h3", None)])
        for bad in ("", "# only\n", "h1 boss\n", "h1 server extra\n"):
            with self.assertRaises(L.LaunchError, msg=bad):
                L.parse_hostfile(bad)

    def test_hostfile_roles(self):
        entries = [("h1", "scheduler"), ("h2", "server"), ("h3", "worker"), ("h4", "worker")]
        self.assertEqual(L.hostfile_plan(entries, 2, 3), [
            ("scheduler", 0, "h1"), ("server", 0, "h2"), ("server", 1, "h2"),
            ("worker", 0, "h3"), ("worker", 1, "h4"), ("worker", 2, "h3")])

    def test_hostfile_unmarked(self):
        entries = [("a", None), ("b", None)]
        self.assertEqual(L.hostfile_plan(entries, 2, 2), [
            ("scheduler", 0, "a"), ("server", 0, "a"), ("server", 1, "b"),
            ("worker", 0, "a"), ("worker", 1, "b")])

    def test_hostfile_errors(self):
        with self.assertRaises(L.LaunchError):
            L.hostfile_plan([("a", "scheduler"), ("b", "scheduler"), ("c", None)], 1, 1)
        with self.assertRaises(L.LaunchError):
            L.hostfile_plan([("a", "scheduler"), ("b", "server")], 1, 1)  # no worker host

    def test_ip_literal(self):
        self.assertEqual(L.ip_literal("10.0.0.2"), "10.0.0.2")
        self.assertEqual(L.ip_literal("::1"), "::1")
        self.assertIsNone(L.ip_literal("node1"))

    def test_host_of(self):
        self.assertEqual(L.host_of("user@node1"), "node1")
        self.assertEqual(L.host_of("node1"), "node1")

    def test_ssh_argv_quotes(self):
        argv = L.ssh_argv("ssh", ["-o", "BatchMode=yes"], "h1", {"A": "x y", "B": "1"},
                          ["DMLC_ENABLE_RDMA"], "/my dir", ["prog", "it's"])
        self.assertEqual(argv[:4], ["ssh", "-o", "BatchMode=yes", "h1"])
        self.assertEqual(argv[4], "cd '/my dir' && exec env -u DMLC_ENABLE_RDMA 'A=x y' B=1 "
                                  "prog 'it'\"'\"'s'")

    def test_exit_codes(self):
        self.assertEqual(L.launcher_exit_code(3), 3)
        self.assertEqual(L.launcher_exit_code(-9), 137)
        self.assertEqual(L.describe_exit(-9), "killed by SIGKILL")
        self.assertEqual(L.describe_exit(2), "exit code 2")


class CommandLineTest(unittest.TestCase):
    def parse(self, *argv):
        return L.make_parser().parse_args(list(argv))

    def test_local_procs(self):
        args = self.parse("-s", "2", "-w", "1", "--port", "9999", "--env", "X=1",
                          "--", "prog", "-a")
        procs = L.build_procs(args, {"PATH": "/bin", "DMLC_ROLE": "stale"})
        self.assertEqual([p.label for p in procs], ["scheduler", "server 0", "server 1", "worker 0"])
        self.assertEqual(procs[2].argv, ["prog", "-a"])
        self.assertEqual(procs[2].env["DMLC_ROLE"], "server")
        self.assertEqual(procs[2].env["DMLC_RANK"], "1")
        self.assertEqual(procs[2].env["DMLC_PS_ROOT_PORT"], "9999")
        self.assertEqual(procs[2].env["X"], "1")
        self.assertEqual(procs[2].env["PATH"], "/bin")
        self.assertEqual(procs[0].env["DMLC_ROLE"], "scheduler")

    def test_group_size_starts_a_process_per_instance(self):
        args = self.parse("-s", "2", "-w", "1", "--group-size", "2", "--port", "9999",
                          "--", "prog")
        procs = L.build_procs(args, {})
        self.assertEqual([p.label for p in procs],
                         ["scheduler", "server 0", "server 1", "server 2", "server 3",
                          "worker 0", "worker 1"])
        for p in procs:
            self.assertEqual(p.env["DMLC_GROUP_SIZE"], "2")
            self.assertEqual(p.env["DMLC_NUM_SERVER"], "2")
            self.assertEqual(p.env["DMLC_NUM_WORKER"], "1")
            self.assertNotIn("DMLC_RANK", p.env)
        self.assertNotIn("DMLC_INSTANCE_ID", procs[0].env)
        self.assertEqual((procs[3].env["DMLC_NODE_RANK"], procs[3].env["DMLC_INSTANCE_ID"]),
                         ("1", "0"))
        self.assertEqual((procs[6].env["DMLC_NODE_RANK"], procs[6].env["DMLC_INSTANCE_ID"]),
                         ("0", "1"))
        norank = L.build_procs(self.parse("--group-size", "3", "--no-rank", "--port", "1",
                                          "--", "prog"), {})
        self.assertEqual(len(norank), 7)
        self.assertNotIn("DMLC_NODE_RANK", norank[2].env)
        self.assertEqual(norank[2].env["DMLC_INSTANCE_ID"], "1")
        with self.assertRaises(L.LaunchError):
            L.build_procs(self.parse("--group-size", "0", "--", "prog"), {})

    def test_role_env(self):
        self.assertEqual(L.parse_role_env(["worker:A=1", "server:B=2", "worker:C=3"]),
                         {"worker": {"A": "1", "C": "3"}, "server": {"B": "2"}})
        for bad in (["A=1"], ["boss:A=1"], ["worker:A"]):
            with self.assertRaises(L.LaunchError, msg=bad):
                L.parse_role_env(bad)
        args = self.parse("--env", "X=all", "--role-env", "worker:X=w", "--role-env",
                          "server:PS_BUSY_POLL=1", "--", "p")
        procs = {p.label: p.env for p in L.build_procs(args, {})}
        self.assertEqual(procs["worker 0"]["X"], "w")
        self.assertEqual(procs["server 0"]["X"], "all")
        self.assertEqual(procs["server 0"]["PS_BUSY_POLL"], "1")
        self.assertNotIn("PS_BUSY_POLL", procs["scheduler"])
        self.assertNotIn("PS_BUSY_POLL", procs["worker 0"])

    def test_scheduler_cmd_and_van(self):
        args = self.parse("--scheduler-cmd", "sched --x 'a b'", "--van", "tcp", "--", "prog")
        procs = L.build_procs(args, {"DMLC_ENABLE_RDMA": "ibverbs"})
        self.assertEqual(procs[0].argv, ["sched", "--x", "a b"])
        self.assertEqual(procs[1].argv, ["prog"])
        self.assertNotIn("DMLC_ENABLE_RDMA", procs[1].env)
        self.assertEqual(procs[1].env["DMLC_PS_VAN_TYPE"], "tcp")

    def test_slurm_procs(self):
        env = {"SLURM_PROCID": "2", "SLURM_NTASKS": "4", "SLURM_JOB_ID": "7",
               "SLURM_NODELIST": "c[1-2]"}
        procs = L.build_procs(self.parse("--slurm", "-s", "1", "--", "p"), env)
        self.assertEqual(len(procs), 1)
        self.assertEqual(procs[0].label, "worker 0")
        self.assertEqual(procs[0].env["DMLC_PS_ROOT_URI"], "c1")
        self.assertEqual(procs[0].env["DMLC_NUM_WORKER"], "2")

    def test_errors(self):
        with self.assertRaises(L.LaunchError):
            L.build_procs(self.parse("-s", "1"), {})
        with self.assertRaises(L.LaunchError):
            L.build_procs(self.parse("-s", "0", "--", "p"), {})


if __name__ == "__main__":
    unittest.main()
