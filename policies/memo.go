package policies

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"sync"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"k8s.io/utils/lru"

	"github.com/sar-bridge/sar-bridge/internal/astjson"
	"github.com/sar-bridge/sar-bridge/internal/sizedlru"
)

// memoSize bounds the keys one Evaluator (one policy load) remembers without a result
// (see memo); memoBytes and memoEntryBytes bound the results it keeps by their size
// (issue 31): a decision on a pod of 5,000 containers names every one of them in its
// modifications, and any user who may create a pod can send such pods.
const (
	memoSize       = 4096
	memoBytes      = 32 << 20
	memoEntryBytes = 256 << 10
	memoEntryExtra = 160 // the entry, its key and its list element, besides the value
)

// Memo lets EvalValue answer from an earlier evaluation. Salt holds everything the
// result depends on besides the policy and the input it reads (the caller's review
// outcome, object versions, mapping generation); a result is reused until Expires.
// The zero Memo evaluates every time.
type Memo struct {
	Salt    []byte
	Expires time.Time
}

// MemoOutcome says how EvalValue used the memo.
type MemoOutcome string

const (
	MemoHit  MemoOutcome = "hit"
	MemoMiss MemoOutcome = "miss"
	// MemoOff: the caller asked for no memo, or the query cannot be memoised.
	MemoOff MemoOutcome = "off"
)

// Result is an evaluation's answer, in Rego's value form: callers read it or encode it
// once (astjson.AppendJSON) rather than converting it to Go values. Value is nil when
// the document is undefined, and is shared with other decisions when it came from the
// memo: callers must not modify it.
type Result struct {
	Value   ast.Value
	Defined bool
	Memo    MemoOutcome
}

// memo holds results keyed by the hash of the query path, the caller's salt and the
// values at the query's input footprint. An Evaluator is built per policy and data
// load, so a reload starts with an empty memo.
//
// A result is kept the second time its key is evaluated, not the first. The pods of a
// Job or array job repeat their key at once, and distinct specs never do: keeping each
// of theirs (some 3 kB) only grew the heap the garbage collector walks and pushed out
// entries that do repeat.
type memo struct {
	entries *sizedlru.Cache[[sha256.Size]byte, memoEntry]
	seen    *lru.Cache // keys evaluated once whose results were not kept
}

type memoEntry struct {
	value   ast.Value
	defined bool
	expires time.Time
}

func newMemo(size int) *memo {
	return &memo{entries: sizedlru.New[[sha256.Size]byte, memoEntry](memoBytes, memoEntryBytes), seen: lru.New(size)}
}

func (m *memo) get(key [sha256.Size]byte, now time.Time) (memoEntry, bool) {
	e, ok := m.entries.Get(key)
	if !ok {
		return memoEntry{}, false
	}
	if !now.Before(e.expires) {
		m.entries.Remove(key)
		return memoEntry{}, false
	}
	return e, true
}

// add keeps e when key was evaluated before, and otherwise remembers that it was.
func (m *memo) add(key [sha256.Size]byte, e memoEntry) {
	if _, again := m.seen.Get(key); !again {
		m.seen.Add(key, struct{}{})
		return
	}
	m.seen.Remove(key)
	var size int64 = memoEntryExtra
	if e.value != nil {
		size += astjson.Size(e.value)
	}
	m.entries.Add(key, e, size)
}

// keyBuffers recycles the buffers memo keys are encoded into before hashing.
var keyBuffers = sync.Pool{New: func() any { return new([]byte) }}

// memoKey hashes what a memoised result depends on. Lengths prefix the variable
// parts so that no two different tuples encode alike.
func memoKey(path []string, salt []byte, fp footprint, input ast.Value) [sha256.Size]byte {
	bp := keyBuffers.Get().(*[]byte)
	b := binary.AppendUvarint((*bp)[:0], uint64(len(path)))
	for _, seg := range path {
		b = append(binary.AppendUvarint(b, uint64(len(seg))), seg...)
	}
	b = append(binary.AppendUvarint(b, uint64(len(salt))), salt...)
	b = fp.appendValues(b, input)
	key := sha256.Sum256(b)
	*bp = b
	keyBuffers.Put(bp)
	return key
}

// appendValues appends the canonical encoding of the value at each of fp's paths in
// input (absent where input has none). The value at the prefix a path shares with the
// one before it is reused, not looked up again from the root: the paths of one policy
// mostly start alike (input.pod.spec...).
func (fp footprint) appendValues(b []byte, input ast.Value) []byte {
	var stack [8]ast.Value
	walked := stack[:0] // walked[j]: the value at the current path's first j+1 terms
	for i, p := range fp.paths {
		walked = walked[:fp.shared[i]] // walked holds all of the previous path's values
		v := input
		if len(walked) > 0 {
			v = walked[len(walked)-1]
		}
		for j := len(walked); j < len(p); j++ {
			v = astjson.Find(v, p[j:j+1])
			walked = append(walked, v)
		}
		b = astjson.AppendCanonical(b, v)
	}
	return b
}

// EvalValue evaluates data.<path...> on an input already in Rego's value form (see
// astjson), as Eval does, and may answer from the memo (see Memo). A query is
// memoised only when its input footprint is bounded and it reaches no
// nondeterministic built-in (see inputFootprint).
func (e *Evaluator) EvalValue(ctx context.Context, path []string, input ast.Value, m Memo) (Result, error) {
	p, err := e.prepare(ctx, path)
	if err != nil || p == nil {
		return Result{Memo: MemoOff}, err
	}
	if m.Salt == nil || !p.footprint.memoisable() {
		v, defined, err := e.evalQuery(ctx, path, p, input)
		return Result{Value: v, Defined: defined, Memo: MemoOff}, err
	}
	key := memoKey(path, m.Salt, p.footprint, input)
	now := time.Now()
	if hit, ok := e.memo.get(key, now); ok {
		return Result{Value: hit.value, Defined: hit.defined, Memo: MemoHit}, nil
	}
	v, defined, err := e.evalQuery(ctx, path, p, input)
	if err != nil {
		return Result{Memo: MemoMiss}, err
	}
	if now.Before(m.Expires) {
		e.memo.add(key, memoEntry{value: v, defined: defined, expires: m.Expires})
	}
	return Result{Value: v, Defined: defined, Memo: MemoMiss}, nil
}

// MemoStatus says whether the document at path can be memoised, and if not why.
func (e *Evaluator) MemoStatus(ctx context.Context, path []string) (memoisable bool, reason string, err error) {
	p, err := e.prepare(ctx, path)
	if err != nil {
		return false, "", err
	}
	if p == nil {
		return false, "the document is undefined", nil
	}
	return p.footprint.memoisable(), p.footprint.reason, nil
}

// MemoBytes is what the memo's kept results hold, as charged against memoBytes.
func (e *Evaluator) MemoBytes() int64 { return e.memo.entries.Bytes() }
