package slurmjob

import (
	"fmt"
	"strings"
)

// Annotations the SLURM plugin pastes, as they are, into the job script's command line
// that starts the container: `singularity exec <defaults> <mounts> <options> ...` or
// `enroot start <defaults> <mounts> <options> ...`. The HTCondor plugin does the same
// with htcondor-job.vk.io/singularity-options.
const (
	SingularityMountsAnnotation  = "slurm-job.vk.io/singularity-mounts"
	SingularityOptionsAnnotation = "slurm-job.vk.io/singularity-options"
	EnrootMountsAnnotation       = "slurm-job.vk.io/enroot-mounts"
	EnrootOptionsAnnotation      = "slurm-job.vk.io/enroot-options"
)

// ContainerArgs is what a container-runtime annotation asks for.
type ContainerArgs struct {
	Options []string // the options given, in long form ("--bind", "--nv"), in order
	Sources []string // host paths they mount or read, cleaned, in order
}

// runtimeOption is how a container runtime's option takes a value, and which host
// paths that value names (nil when it names none).
type runtimeOption struct {
	value   bool
	sources func(string) ([]string, error)
}

// singularityOptions are the options of singularity/apptainer exec that take a value;
// the others are taken as flags, so a value given to one of those must be attached
// ("--opt=value"), or it reads as the image and is refused.
var singularityOptions = map[string]runtimeOption{
	"bind": {true, bindSources}, "mount": {true, mountSources}, "home": {true, firstField},
	"overlay": {true, firstField}, "workdir": {true, wholeValue}, "env-file": {true, wholeValue},
	"apply-cgroups": {true, wholeValue}, "pem-path": {true, wholeValue}, "authfile": {true, wholeValue},
	"env": {value: true}, "scratch": {value: true}, "pwd": {value: true}, "security": {value: true},
	"add-caps": {value: true}, "drop-caps": {value: true}, "network": {value: true},
	"network-args": {value: true}, "hostname": {value: true}, "app": {value: true}, "dns": {value: true},
	"no-mount": {value: true}, "fusemount": {value: true},
}

var singularityShort = map[string]string{
	"B": "bind", "H": "home", "o": "overlay", "W": "workdir", "S": "scratch",
	"c": "contain", "C": "containall", "e": "cleanenv", "f": "fakeroot", "u": "userns",
	"w": "writable", "i": "ipc", "p": "pid", "n": "net",
}

// enrootOptions are enroot start's options that take a value (doc/cmd/start.md):
// --conf is a bash script enroot runs on the host before the container starts.
var enrootOptions = map[string]runtimeOption{
	"conf": {true, wholeValue}, "rc": {true, wholeValue}, "mount": {true, firstField}, "env": {value: true},
}

var enrootShort = map[string]string{"c": "conf", "e": "env", "m": "mount", "r": "root", "w": "rw"}

// ParseSingularityArgs reads a singularity-mounts or singularity-options annotation.
func ParseSingularityArgs(value string) (ContainerArgs, error) {
	return parseRuntimeArgs(value, singularityOptions, singularityShort)
}

// ParseEnrootArgs reads an enroot-mounts or enroot-options annotation.
func ParseEnrootArgs(value string) (ContainerArgs, error) {
	return parseRuntimeArgs(value, enrootOptions, enrootShort)
}

func parseRuntimeArgs(value string, known map[string]runtimeOption, short map[string]string) (ContainerArgs, error) {
	var args ContainerArgs
	words, err := commandWords(value)
	if err != nil {
		return args, err
	}
	for i := 0; i < len(words); i++ {
		name, val, hasVal, err := runtimeOptionWord(words[i], known, short)
		if err != nil {
			return args, err
		}
		spec := known[name]
		if spec.value && !hasVal {
			if i+1 == len(words) {
				return args, fmt.Errorf("%q: --%s needs a value", words[i], name)
			}
			i++
			val, hasVal = words[i], true
		}
		args.Options = append(args.Options, "--"+name)
		if spec.sources == nil || !hasVal {
			continue
		}
		srcs, err := spec.sources(val)
		if err != nil {
			return args, fmt.Errorf("--%s %q: %w", name, val, err)
		}
		args.Sources = append(args.Sources, srcs...)
	}
	return args, nil
}

// runtimeOptionWord reads one option word: "--name", "--name=value", "-X", "-Xvalue" or
// "-X=value" (pflag's forms; enroot takes the same).
func runtimeOptionWord(w string, known map[string]runtimeOption, short map[string]string) (name, val string, hasVal bool, err error) {
	switch {
	case w == "--" || w == "-" || !strings.HasPrefix(w, "-"):
		return "", "", false, fmt.Errorf("%q is not an option: the container runtime would read it as the image or command", w)
	case strings.HasPrefix(w, "--"):
		name, val, hasVal = strings.Cut(w[2:], "=")
		return name, val, hasVal, nil
	}
	long, ok := short[w[1:2]]
	if !ok {
		return "", "", false, fmt.Errorf("%q is not a short option sar-bridge knows; write the option's long form", w)
	}
	rest := w[2:]
	switch {
	case rest == "":
		return long, "", false, nil
	case !known[long].value:
		return "", "", false, fmt.Errorf("%q combines short options or gives a flag a value; write each option on its own, in its long form", w)
	}
	return long, strings.TrimPrefix(rest, "="), true, nil
}

// commandWords splits an annotation the plugin pastes into a shell command line. Only
// characters the shell reads as themselves are allowed, so its words are the ones
// split at spaces: no quoting, expansion, redirection or command separator.
func commandWords(value string) ([]string, error) {
	for i, r := range value {
		if !plainShellChar(r) {
			return nil, fmt.Errorf("contains %q (byte %d): the plugin pastes this annotation into the job script's shell command line, where it would be shell syntax; only letters, digits, spaces and _ . , : / = @ + - are allowed", r, i)
		}
	}
	return strings.Fields(value), nil
}

func plainShellChar(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(" _.,:/=@+-", r)
}

// bindSources are the sources of a --bind list: "src[:dst[:opts]]", comma-separated.
func bindSources(v string) ([]string, error) {
	var srcs []string
	for _, spec := range strings.Split(v, ",") {
		src, err := firstField(spec)
		if err != nil {
			return nil, err
		}
		srcs = append(srcs, src...)
	}
	return srcs, nil
}

// mountSources is the source of a --mount spec: "type=bind,source=/x,destination=/y"
// ("src" also names it).
func mountSources(v string) ([]string, error) {
	var srcs []string
	for _, field := range strings.Split(v, ",") {
		key, val, _ := strings.Cut(field, "=")
		if key == "source" || key == "src" {
			src, err := hostPath(val)
			if err != nil {
				return nil, err
			}
			srcs = append(srcs, src)
		}
	}
	if len(srcs) == 0 {
		return nil, fmt.Errorf("names no source=")
	}
	return srcs, nil
}

// firstField is the host path before the first ":" ("src:dst:opts", "path:ro").
func firstField(v string) ([]string, error) {
	src, _, _ := strings.Cut(v, ":")
	return wholeValue(src)
}

func wholeValue(v string) ([]string, error) {
	src, err := hostPath(v)
	if err != nil {
		return nil, err
	}
	return []string{src}, nil
}

// CleanHostPath is p as a host path the policy can match against prefixes (cleaned
// absolute, no ".." element), or why it is not one.
func CleanHostPath(p string) (string, error) { return hostPath(p) }

// hostPath is an absolute host path, cleaned; relative paths (resolved against a
// directory the pod does not choose) and ".." elements are refused.
func hostPath(p string) (string, error) {
	clean, ok := cleanAbs(p)
	switch {
	case p == "":
		return "", fmt.Errorf("a host path is empty")
	case !strings.HasPrefix(p, "/"):
		return "", fmt.Errorf("host path %q is relative; give an absolute path", p)
	case !ok:
		return "", fmt.Errorf("host path %q has a .. element; give the path without it", p)
	}
	return clean, nil
}

// PlainWord checks a value the plugin writes unquoted into the job script as one word
// (an image, slurm-job.vk.io/image-root, a hostPath path, a mountPath): it must be
// non-empty and made only of characters the shell reads as themselves, without spaces.
func PlainWord(s string) error {
	if s == "" {
		return fmt.Errorf("is empty")
	}
	for i, r := range s {
		if r == ' ' || !plainShellChar(r) {
			return fmt.Errorf("contains %q (byte %d): the plugin writes it unquoted into the job script's shell command line; only letters, digits and _ . , : / = @ + - are allowed", r, i)
		}
	}
	return nil
}
