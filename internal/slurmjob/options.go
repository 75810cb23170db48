package slurmjob

import (
	"slices"
	"strings"
)

// argKind says whether an sbatch option takes a value, as getopt_long sees it: that
// decides which words of the job script's #SBATCH lines become its value.
type argKind int

const (
	unknownArg  argKind = iota // not an option of sbatch itself (a site's SPANK plugin may add it)
	noArg                      // a value is an error ("--hold=x")
	optionalArg                // the value only attaches ("--exclusive=user"); a next word is not taken
	requiredArg                // "--account=x" or "--account x"; without one, the NEXT word is taken
)

// sbatch's own options, read from SchedMD/slurm src/common/slurm_opt.c at 284c3b9
// (2026-08): the options sbatch's table holds, by how they take a value. Knowing them
// is what lets the parse refuse a value-less option that would swallow the plugin's
// next #SBATCH line (its --uid=…), and an abbreviation that getopt_long would expand.
var (
	sbatchNoArg = "consolidate-segments contiguous external get-user-env help hold ignore-pbs no-requeue " +
		"overcommit oversubscribe parsable quiet reboot spread-job spread-segments stepmgr test-only usage " +
		"use-min-nodes verbose version wait"
	sbatchOptionalArg = "exclusive nice no-kill oom-kill-step propagate requeue resv-ports"
	sbatchRequiredArg = "account acctg-freq array autocomplete batch bb bbf begin chdir cluster cluster-constraint " +
		"clusters comment constraint container container-id context core-spec cores-per-socket cpu-freq " +
		"cpus-per-gpu cpus-per-task deadline delay-boot dependency distribution error exclude export export-file " +
		"extra extra-node-info gid gpu-bind gpu-freq gpus gpus-per-node gpus-per-socket gpus-per-task gres " +
		"gres-flags hint input job-name kill-on-invalid-dep licenses mail-type mail-user mcs-label mem mem-bind " +
		"mem-per-cpu mem-per-gpu mem-update mincpus network nodefile nodelist nodes ntasks ntasks-per-core " +
		"ntasks-per-gpu ntasks-per-node ntasks-per-socket ntasks-per-tres open-mode output partition prefer " +
		"priority profile qos reservation resources runtime segment signal sockets-per-node switches " +
		"tasks-per-node thread-spec threads-per-core time time-min tmp tres-bind tres-per-task uid " +
		"wait-all-nodes wckey wrap"
	// sbatchShort maps sbatch's one-letter options to their long names (same source).
	sbatchShort = map[rune]string{
		'A': "account", 'a': "array", 'b': "begin", 'B': "extra-node-info", 'C': "constraint",
		'c': "cpus-per-task", 'D': "chdir", 'd': "dependency", 'e': "error", 'F': "nodefile",
		'G': "gpus", 'H': "hold", 'h': "help", 'i': "input", 'J': "job-name", 'k': "no-kill",
		'L': "licenses", 'M': "clusters", 'm': "distribution", 'N': "nodes", 'n': "ntasks",
		'O': "overcommit", 'o': "output", 'p': "partition", 'Q': "quiet", 'q': "qos",
		's': "oversubscribe", 'S': "core-spec", 't': "time", 'V': "version", 'v': "verbose",
		'W': "wait", 'w': "nodelist", 'x': "exclude",
	}
)

// sbatchOptions is every long option name (without dashes) with how it takes a value.
var sbatchOptions = func() map[string]argKind {
	m := map[string]argKind{}
	for kind, names := range map[argKind]string{noArg: sbatchNoArg, optionalArg: sbatchOptionalArg, requiredArg: sbatchRequiredArg} {
		for _, n := range strings.Fields(names) {
			m[n] = kind
		}
	}
	return m
}()

// pluginAliases is the SLURM plugin's own table (pkg/slurm/prepare.go, slurmFlagAliases):
// the short forms it treats as the same key as their long form when it keeps "the later
// value". Any other spelling (-Aproj, -q, an abbreviation) is a key of its own to it.
var pluginAliases = map[string]string{
	"-A": "--account", "-C": "--constraint", "-D": "--chdir", "-G": "--gpus",
	"-J": "--job-name", "-N": "--nodes", "-c": "--cpus-per-task", "-n": "--ntasks",
	"-o": "--output", "-p": "--partition", "-t": "--time", "-w": "--nodelist",
}

// abbreviated lists the long options that name is a proper prefix of: getopt_long
// would expand an unambiguous one, so "--acco" means --account to sbatch.
func abbreviated(name string) []string {
	var full []string
	for n := range sbatchOptions {
		if len(n) > len(name) && strings.HasPrefix(n, name) {
			full = append(full, "--"+n)
		}
	}
	slices.Sort(full)
	return full
}
