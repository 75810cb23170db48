package policies

import (
	"math/bits"
	"regexp"
	"slices"
	"strconv"
	"sync"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/topdown"
)

// sar-bridge's input.resources gives policies the pod's resource amounts as numbers, so
// that they compare amounts with caps and quotas without parsing a quantity per decision
// (a regex.match and a units.parse each, most of the default policy's cost before):
//
//	{"containers": [{"name": name, "limits": {res: number}, "requests": {res: number}}, ...],
//	 "largest": {res: number}, "unlimited": [name, ...]}
//
// containers has one entry per container then per init container, in input.pod's order
// (name is the container's name when it is a string, else "");
// largest is, per resource, the largest amount one container sets: its limit, or its
// request where it sets no limit (what per-container caps compare against); unlimited
// names, once each and in that order, the containers with a non-empty string name that
// set no limit (limits absent, null or {}: what default limits apply to). Each number
// is what units.parse gives for the amount, and it is there only when the amount is a
// string of the quantity grammar the default policy accepts; when any amount is not,
// input.resources is null and policies read input.pod themselves.

// quantityGrammar is the default policy's quantity grammar (rego/authz.rego).
var quantityGrammar = regexp.MustCompile(`^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[mkMGTPE]|[eE][+-]?[0-9]{1,3})?$`)

// unitsParse is OPA's own units.parse, so numbers agree with the policy's to the digit.
var unitsParse = topdown.GetBuiltin(ast.UnitsParse.Name)

// Keys of input.pod and input.resources, allocated once.
var (
	specKey, resourcesKey     = ast.StringTerm("spec"), ast.StringTerm("resources")
	nameKey                   = ast.StringTerm("name")
	limitsKey, requestsKey    = ast.StringTerm("limits"), ast.StringTerm("requests")
	containersKey, largestKey = ast.StringTerm("containers"), ast.StringTerm("largest")
	unlimitedKey              = ast.StringTerm("unlimited")
	containerLists            = []*ast.Term{containersKey, ast.StringTerm("initContainers")}
)

// resourceNames are the resource names most pods set, as terms allocated once.
var resourceNames = map[ast.String]*ast.Term{
	"cpu": ast.StringTerm("cpu"), "memory": ast.StringTerm("memory"), "ephemeral-storage": ast.StringTerm("ephemeral-storage"),
}

// ownTerm is a term of its own holding s, never one of the pod's. What PodResources
// returns outlives the request (authorizer's spec cache, the decision memo), and one
// term of the decoded pod would keep that request's whole input alive: astjson cuts a
// document's terms from shared blocks.
func ownTerm(s ast.String) *ast.Term {
	if t, ok := resourceNames[s]; ok {
		return t
	}
	return ast.StringTerm(string(s))
}

// PodResources is input.resources for a pod value (input.pod), or null.
func PodResources(pod ast.Value) ast.Value {
	spec, ok := podSpec(pod)
	if !ok {
		return ast.Null{}
	}
	containers := make([]*ast.Term, 0, 2)
	largest := ast.NewObject()
	var unlimited []*ast.Term
	for _, list := range containerLists {
		if spec == nil {
			break
		}
		cs := spec.Get(list)
		if cs == nil {
			continue // absent
		}
		arr, ok := cs.Value.(*ast.Array)
		if !ok {
			return ast.Null{}
		}
		for i := range arr.Len() {
			c, ok := containerAmounts(arr.Elem(i).Value)
			if !ok {
				return ast.Null{}
			}
			containers = append(containers, ast.NewTerm(c))
			keepLargest(largest, c)
			unlimited = appendUnlimited(unlimited, c)
		}
	}
	return ast.NewObject(
		[2]*ast.Term{containersKey, ast.ArrayTerm(containers...)},
		[2]*ast.Term{largestKey, ast.NewTerm(largest)},
		[2]*ast.Term{unlimitedKey, ast.ArrayTerm(unlimited...)},
	)
}

// appendUnlimited adds a container's name to unlimited when the name is not empty, the
// container sets no limit and the name is not there yet.
func appendUnlimited(unlimited []*ast.Term, container ast.Object) []*ast.Term {
	name := container.Get(nameKey)
	if name.Value.(ast.String) == "" || container.Get(limitsKey).Value.(ast.Object).Len() > 0 || slices.ContainsFunc(unlimited, name.Equal) {
		return unlimited
	}
	return append(unlimited, name)
}

// podSpec is pod.spec, nil when absent; false when the pod or its spec is not an
// object (no pod has that shape: what the bridge derives from it is then null).
func podSpec(pod ast.Value) (ast.Object, bool) {
	podObj, ok := pod.(ast.Object)
	if !ok {
		return nil, false
	}
	t := podObj.Get(specKey)
	if t == nil {
		return nil, true
	}
	spec, ok := t.Value.(ast.Object)
	return spec, ok
}

// keepLargest raises largest[res] to a container's limit of res, or its request where
// it sets no limit.
func keepLargest(largest ast.Object, container ast.Object) {
	limits := container.Get(limitsKey).Value.(ast.Object)
	requests := container.Get(requestsKey).Value.(ast.Object)
	raise := func(res, amount *ast.Term) {
		if cur := largest.Get(res); cur == nil || ast.Compare(amount.Value, cur.Value) > 0 {
			largest.Insert(res, amount)
		}
	}
	limits.Foreach(raise)
	requests.Foreach(func(res, amount *ast.Term) {
		if limits.Get(res) == nil {
			raise(res, amount)
		}
	})
}

// containerAmounts is one container's entry of input.resources; false when an amount is
// not a quantity of the grammar (or the container is not an object).
func containerAmounts(c ast.Value) (ast.Object, bool) {
	obj, ok := c.(ast.Object)
	if !ok {
		return nil, false
	}
	var res ast.Object
	if r := obj.Get(resourcesKey); r != nil {
		switch v := r.Value.(type) {
		case ast.Object:
			res = v
		case ast.Null:
		default:
			return nil, false
		}
	}
	limits, ok := parsedAmounts(res, limitsKey)
	if !ok {
		return nil, false
	}
	requests, ok := parsedAmounts(res, requestsKey)
	if !ok {
		return nil, false
	}
	name := ast.StringTerm("")
	if n := obj.Get(nameKey); n != nil {
		if s, ok := n.Value.(ast.String); ok {
			name = ownTerm(s)
		}
	}
	return ast.NewObject([2]*ast.Term{nameKey, name}, [2]*ast.Term{limitsKey, ast.NewTerm(limits)}, [2]*ast.Term{requestsKey, ast.NewTerm(requests)}), true
}

// parsedAmounts is res[kind] with every amount as units.parse gives it ({} when absent
// or null); false when an amount is not a string of the grammar.
func parsedAmounts(res ast.Object, kind *ast.Term) (ast.Value, bool) {
	parsed := ast.NewObject()
	if res == nil {
		return parsed, true
	}
	t := res.Get(kind)
	if t == nil {
		return parsed, true
	}
	switch amounts := t.Value.(type) {
	case ast.Null:
		return parsed, true
	case ast.Object:
		ok := true
		amounts.Foreach(func(name, raw *ast.Term) {
			n, valid := quantityNumber(raw.Value)
			if !valid {
				ok = false
				return
			}
			key, _ := name.Value.(ast.String) // a JSON object's key
			parsed.Insert(ownTerm(key), n)
		})
		return parsed, ok
	default:
		return nil, false
	}
}

// quantityNumber is units.parse(raw) for a string of the grammar, as a term of its own
// (never the pod's: see ownTerm). Whole amounts are read in integers (wholeQuantity);
// the others repeat across pods ("500m", "0.5"), so their parsed terms are kept, a
// bounded number of them, and shared: values are never modified.
func quantityNumber(raw ast.Value) (*ast.Term, bool) {
	s, ok := raw.(ast.String)
	if !ok {
		return nil, false
	}
	if n, ok := wholeQuantity(string(s)); ok {
		return ast.NewTerm(ast.Number(strconv.FormatUint(n, 10))), true
	}
	if t, ok := parsedQuantities.get(string(s)); ok {
		return t, true
	}
	if !quantityGrammar.MatchString(string(s)) {
		return nil, false
	}
	var out *ast.Term
	err := unitsParse(topdown.BuiltinContext{}, []*ast.Term{ast.NewTerm(s)}, func(t *ast.Term) error {
		out = t
		return nil
	})
	if err != nil || out == nil {
		return nil, false
	}
	parsedQuantities.add(string(s), out)
	return out, true
}

// wholeMultipliers are units.parse's integer suffixes, as the quantity grammar allows
// them ("m" aside: its results need not be whole).
var wholeMultipliers = map[string]uint64{"": 1,
	"k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
	"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50, "Ei": 1 << 60}

// wholeQuantity is units.parse(s) for the common amounts, digits and an integer suffix
// ("1500Mi", "4", "2G"), in integer arithmetic: OPA's works in big.Rat, five dozen
// allocations an amount, and a pod's memory amounts are seldom ones seen before. false
// for anything else (a sign, a fraction, an exponent, "m", a result over 64 bits),
// which units.parse itself then reads. The same number as units.parse writes it
// (decimal digits, no leading zeros): TestWholeQuantity.
func wholeQuantity(s string) (uint64, bool) {
	i := 0
	var n uint64
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		hi, lo := bits.Mul64(n, 10)
		lo, carry := bits.Add64(lo, uint64(s[i]-'0'), 0)
		if hi != 0 || carry != 0 {
			return 0, false
		}
		n = lo
		i++
	}
	if i == 0 {
		return 0, false
	}
	mult, ok := wholeMultipliers[s[i:]]
	if !ok {
		return 0, false
	}
	hi, v := bits.Mul64(n, mult)
	return v, hi == 0
}

// quantityCache maps quantity strings to their parsed value; it starts over when full
// (a hit costs a map read, no allocation, which an LRU's boxed keys would).
type quantityCache struct {
	mu     sync.RWMutex
	values map[string]*ast.Term
}

const maxParsedQuantities = 4096

var parsedQuantities = &quantityCache{values: map[string]*ast.Term{}}

func (c *quantityCache) get(s string) (*ast.Term, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	v, ok := c.values[s]
	return v, ok
}

func (c *quantityCache) add(s string, v *ast.Term) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.values) >= maxParsedQuantities {
		clear(c.values)
	}
	c.values[s] = v
}
