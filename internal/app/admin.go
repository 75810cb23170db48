package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	flag "github.com/spf13/pflag"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sar-bridge/sar-bridge/decisionapi"
	"github.com/sar-bridge/sar-bridge/internal/admin"
	"github.com/sar-bridge/sar-bridge/internal/authorizer"
	"github.com/sar-bridge/sar-bridge/internal/kube"
	"github.com/sar-bridge/sar-bridge/policies"
)

// Exit code of a command line the admin commands cannot run.
const exitUsage = 2

const checkHelp = `Decide pods as the server would, from a terminal: the server's decision core, built
from the same flags (tenants from the flags, the mappings file and OffloadTenants;
policies, their data, --cluster.resources and OPA bundles; quotas against the ledgers'
usage), with live SubjectAccessReviews (no cache); nothing is charged and no server is
involved.

-f takes Pods and workloads with a pod template (Job, CronJob, Deployment, StatefulSet,
DaemonSet, ReplicaSet), several documents at once, "-" for stdin. A template becomes a
pod named like its workload, in the workload's namespace (else --namespace, else the
kubeconfig context's namespace), running as the template's service account.

Exit status: 0 every pod allowed, 1 a pod denied, 2 an error (nothing is printed for a
pod that could not be decided; its error goes to stderr).

Examples:
  # Would the Job's pod be offloaded?
  sar-bridge check --openshift.mappings team-a=interlink.io -f job.yaml

  # Every document of a file, as the server with a policy data file decides
  sar-bridge check --openshift.mappings-file mappings.txt --policies.data data.yaml -f all.yaml -o json

  # As a user (the kubeconfig's user must be allowed to impersonate it), on a node
  kubectl get deploy web -o yaml | sar-bridge check -f - --as alice --as-group hpc-users --node vk-1

  # By the site's OPA bundles, each decision also sent to its decision log (the JSON's
  # decision_id is the event's)
  sar-bridge check --config-file opa-config.yaml -f job.yaml -o json

Usage: sar-bridge check -f FILENAME [flags]

Flags:
`

const whoCanHelp = `List the subjects (users, groups, service accounts) that may offload pods, per
namespace: those bound by RoleBindings and ClusterRoleBindings to a rule granting the
operation's verb on "pods" in the API group of the namespace's tenant (wildcards
included), each confirmed by a SubjectAccessReview. Tenants and their groups are the
server's: OffloadTenants, --openshift.mappings, the mappings file and --tenant.label.
Namespaces of unmapped tenants are left out. Subjects allowed only through another
binding of a group they belong to appear as that group. Every server flag that changes
a decision is accepted, so its command line can be reused.

Exit status: 0 success (also when no subject may offload), 1 an error, 2 a usage error.

Examples:
  # Who may offload anywhere?
  sar-bridge who-can --openshift.mappings team-a=interlink.io

  # Who may offload from team-a to vk-1, with node access reviews as the server runs them?
  sar-bridge who-can -n team-a --review.node-access --node vk-1 -o json

Usage: sar-bridge who-can [flags]

Flags:
`

// adminFlags are what a command line of an admin command holds besides the shared
// decisionOptions.
type adminFlags struct {
	filenames []string
	namespace string
	operation string
	node      string
	as        string
	asGroups  []string
	output    string
	frontDoor string
}

// newAdminFlagSet returns the flags of an admin command; the shared decision flags are
// o's, the rest a's.
func newAdminFlagSet(name string, o *decisionOptions, a *adminFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("sar-bridge "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors and help are printed by the caller
	fs.Usage = func() {}
	o.addFlags(fs)
	fs.StringVarP(&a.namespace, "namespace", "n", "", "Namespace; empty: the kubeconfig context's.")
	fs.StringVar(&a.operation, "operation", "create", "The operation decided: create, delete or status.")
	fs.StringVar(&a.node, "node", "", "The target virtual node.")
	fs.StringVarP(&a.output, "output", "o", "", "Output format: empty for text, or json.")
	return fs
}

// parseAdmin parses args; it prints help or the error itself and returns the exit code
// to stop with, or -1 to go on.
func parseAdmin(fs *flag.FlagSet, help string, args []string, stdout, stderr io.Writer) int {
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, help+fs.FlagUsages())
		return 0
	case err != nil:
		return usageError(stderr, fs.Name(), err)
	case fs.NArg() > 0:
		return usageError(stderr, fs.Name(), fmt.Errorf("unexpected arguments: %q", fs.Args()))
	}
	return -1
}

func validOperation(op string) bool {
	_, ok := decisionapi.Verb(op)
	return ok
}

func usageError(stderr io.Writer, name string, err error) int {
	fmt.Fprintf(stderr, "error: %v\nSee '%s --help' for usage.\n", err, name)
	return exitUsage
}

// validateAdmin checks the shared flags as the server does, then a's, and completes o.
func (o *decisionOptions) validateAdmin(a adminFlags) error {
	if err := o.validate(); err != nil {
		return err
	}
	switch {
	case a.output != "" && a.output != "json":
		return fmt.Errorf("--output %q: want json or nothing", a.output)
	case !validOperation(a.operation):
		return fmt.Errorf("--operation %q: want one of %s", a.operation, strings.Join(decisionapi.Operations(), ", "))
	}
	o.complete() // $KUBECONFIG, as the server and kubectl do
	return nil
}

// defaultNamespace is --namespace, else the kubeconfig context's, as kubectl reads it.
func defaultNamespace(cfg decisionOptions, namespace string) (string, error) {
	if namespace != "" {
		return namespace, nil
	}
	if cfg.kubeconfig == "" {
		return metav1.NamespaceDefault, nil
	}
	ns, _, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: cfg.kubeconfig}, &clientcmd.ConfigOverrides{}).Namespace()
	if err != nil {
		return "", fmt.Errorf("reading the namespace of kubeconfig %s: %w", cfg.kubeconfig, err)
	}
	return ns, nil
}

// newAdminCore is the server's decision core (newDecisionCore) for a one-shot command:
// live reviews, nothing charged, warnings on stderr.
func newAdminCore(ctx context.Context, o decisionOptions, stderr io.Writer) (*decisionCore, error) {
	logger := level.NewFilter(log.NewLogfmtLogger(stderr), level.AllowWarn())
	return newDecisionCore(ctx, o, coreUse{}, nil, logger)
}

// withKubeconfigUser puts the kubeconfig's user in ctx as the decision's caller, as the
// API server names it (SelfSubjectReview).
func withKubeconfigUser(ctx context.Context, client kubernetes.Interface) (context.Context, error) {
	review, err := client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("asking who the kubeconfig's user is (SelfSubjectReview): %w", err)
	}
	u := review.Status.UserInfo
	extra := make(map[string][]string, len(u.Extra))
	for k, v := range u.Extra {
		extra[k] = v
	}
	return request.WithUser(ctx, &user.DefaultInfo{Name: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra}), nil
}

// Check is `sar-bridge check`; it returns the exit code.
func Check(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var cfg decisionOptions
	var a adminFlags
	fs := newAdminFlagSet("check", &cfg, &a)
	fs.StringArrayVarP(&a.filenames, "filename", "f", nil, "File of Pods or workloads to check (repeatable); - reads stdin.")
	fs.StringVar(&a.as, "as", "", "Decide for this user (input.user) instead of each pod's service account; the kubeconfig's user must be allowed to impersonate it.")
	fs.StringArrayVar(&a.asGroups, "as-group", nil, "A group of --as (repeatable); the groups are taken as given, as input.user is.")
	fs.StringVar(&a.frontDoor, "front-door", string(authorizer.FrontDoorDataAPI), "Decide as this front door would (input.front_door: relay, admission or data_api); a rule's action (data.interlink.enforcement) may differ per front door.")
	if code := parseAdmin(fs, checkHelp, args, stdout, stderr); code >= 0 {
		return code
	}
	err := cfg.validateAdmin(a)
	switch {
	case err != nil:
		return usageError(stderr, fs.Name(), err)
	case len(a.filenames) == 0:
		return usageError(stderr, fs.Name(), errors.New("-f/--filename is required"))
	case len(a.asGroups) > 0 && a.as == "":
		return usageError(stderr, fs.Name(), errors.New("--as-group needs --as"))
	case !slices.Contains(policies.FrontDoors, a.frontDoor):
		return usageError(stderr, fs.Name(), fmt.Errorf("--front-door %q: want one of %s", a.frontDoor, strings.Join(policies.FrontDoors, ", ")))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	outcomes, err := check(ctx, cfg, a, stdin, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return admin.ExitError
	}
	print := admin.PrintText
	if a.output == "json" {
		print = admin.PrintJSON
	}
	if err := print(stdout, outcomes); err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return admin.ExitError
	}
	admin.PrintErrors(stderr, outcomes)
	return admin.ExitCode(outcomes)
}

// check reads the pods and decides each one, charging nothing.
func check(ctx context.Context, cfg decisionOptions, a adminFlags, stdin io.Reader, stderr io.Writer) ([]admin.Outcome, error) {
	namespace, err := defaultNamespace(cfg, a.namespace)
	if err != nil {
		return nil, err
	}
	pods, err := readPods(a.filenames, stdin, namespace, a.namespace != "")
	if err != nil {
		return nil, err
	}
	core, err := newAdminCore(ctx, cfg, stderr)
	if err != nil {
		return nil, err
	}
	defer core.stop() // the decision logs go out before check exits
	opts := admin.CheckOptions{Operation: a.operation, Node: a.node, FrontDoor: authorizer.FrontDoor(a.frontDoor)}
	if a.as != "" {
		opts.User = &admin.User{Username: a.as, Groups: a.asGroups}
		if ctx, err = withKubeconfigUser(ctx, core.client); err != nil {
			return nil, err
		}
		// The impersonation checks are reviews for the caller, which the server sends
		// for its authenticated callers; here the caller is the kubeconfig's user, and
		// nothing is cached.
		if err := setImpersonation(core.authz, core.client, 0, 0); err != nil {
			return nil, err
		}
	}
	return admin.Check(ctx, core.authz, pods, opts), nil
}

// readPods reads the pods of every -f in order.
func readPods(filenames []string, stdin io.Reader, namespace string, explicit bool) ([]admin.Pod, error) {
	var pods []admin.Pod
	for _, name := range filenames {
		r := stdin
		if name != "-" {
			f, err := os.Open(name)
			if err != nil {
				return nil, fmt.Errorf("-f: %w", err)
			}
			defer f.Close()
			r = f
		}
		got, err := admin.ReadPods(r, namespace, explicit)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", name, err)
		}
		pods = append(pods, got...)
	}
	return pods, nil
}

// WhoCan is `sar-bridge who-can`; it returns the exit code.
func WhoCan(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	var cfg decisionOptions
	var a adminFlags
	fs := newAdminFlagSet("who-can", &cfg, &a)
	fs.Lookup("namespace").Usage = "Only this namespace; empty: every namespace whose tenant is mapped."
	if code := parseAdmin(fs, whoCanHelp, args, stdout, stderr); code >= 0 {
		return code
	}
	err := cfg.validateAdmin(a)
	switch {
	case err != nil:
		return usageError(stderr, fs.Name(), err)
	case cfg.nodeAccess && a.node == "":
		return usageError(stderr, fs.Name(), errors.New("--review.node-access needs --node: the node reviews name it"))
	case !cfg.nodeAccess && a.node != "":
		return usageError(stderr, fs.Name(), errors.New("--node needs --review.node-access: without it RBAC does not restrict nodes"))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	rows, err := whoCan(ctx, cfg, a, stderr)
	if err == nil && len(rows) == 0 && a.output == "" {
		fmt.Fprintln(stderr, "No subjects found.")
		return 0
	}
	if err == nil {
		print := admin.PrintTable
		if a.output == "json" {
			print = admin.PrintRowsJSON
		}
		err = print(stdout, rows)
	}
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return 1
	}
	return 0
}

// whoCan lists the candidates of the target namespaces and confirms each one. The
// namespaces' tenants and groups are the decision core's (OffloadTenants, flags,
// mappings file), as the server resolves them.
func whoCan(ctx context.Context, cfg decisionOptions, a adminFlags, stderr io.Writer) ([]admin.Row, error) {
	core, err := newAdminCore(ctx, cfg, stderr)
	if err != nil {
		return nil, err
	}
	defer core.stop()
	namespaces, err := listNamespaces(ctx, core.client, a.namespace)
	if err != nil {
		return nil, err
	}
	var targets []admin.Target
	for _, ns := range namespaces {
		resolved := core.authz.ResolveTenant(&ns)
		switch {
		case resolved.Mapped:
			targets = append(targets, admin.Target{Namespace: ns.Name, Group: resolved.Group})
		case a.namespace != "":
			return nil, fmt.Errorf("nobody may offload from namespace %q: %s", ns.Name, resolved.Reason)
		}
	}
	rbac, err := admin.ListRBAC(ctx, core.client, a.namespace)
	if err != nil {
		return nil, err
	}
	verb, _ := decisionapi.Verb(a.operation) // validated with the flags
	candidates := admin.Candidates(rbac, targets, verb)
	reviewer := kube.NewSubjectAccessReviewer(core.client, kube.DefaultRetryBackoff)
	return admin.Confirm(ctx, reviewer, candidates, admin.ConfirmOptions{Verb: verb, Node: a.node})
}

// listNamespaces is the one namespace named, or all of them.
func listNamespaces(ctx context.Context, client kubernetes.Interface, name string) ([]corev1.Namespace, error) {
	if name != "" {
		ns, err := client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("namespace %q not found", name)
		}
		if err != nil {
			return nil, fmt.Errorf("reading namespace %q: %w", name, err)
		}
		return []corev1.Namespace{*ns}, nil
	}
	list, err := client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing namespaces: %w", err)
	}
	return list.Items, nil
}
