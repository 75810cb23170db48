// Package slurmjob reads a pod's HPC annotations the way interLink's SLURM plugin and
// the programs it feeds read them, so that a policy can judge what the job becomes:
// the sbatch options of slurm-job.vk.io/flags (ParseFlags), the host paths that
// singularity and enroot options mount (ParseSingularityArgs, ParseEnrootArgs), and
// whether a path lies under an allowed prefix (UnderPrefix).
//
// Everything here is computed once in Go and handed to Rego in the input; it is
// standard library only. The parses are deliberately strict: whatever the plugin, the
// shell or sbatch could read differently from the result is an error whose message the
// pod's owner can act on, because an HPC site cannot let "almost the same" options
// through.
//
// Sources read (never copied): interlink-hq/interlink-slurm-plugin f8451d9
// (pkg/slurm/prepare.go), SchedMD/slurm 284c3b9 (src/sbatch/opt.c,
// src/common/slurm_opt.c), NVIDIA/enroot doc/cmd/start.md.
package slurmjob
