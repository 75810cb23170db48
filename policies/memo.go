package policies

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"hash/maphash"
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
//
// Entries are found by a prehash (memoPrehash: from the hashes OPA's values carry, a
// microsecond) and used only when their full key (memoKey: the canonical encoding of
// every value read, hashed with SHA-256, a tenth of a pod decision) matches, so the
// full key is computed only when an entry or a first evaluation shares the prehash:
// a distinct spec, most of all, pays for none.
type memo struct {
	entries *sizedlru.Cache[uint64, memoEntry]
	seen    *lru.Cache // prehashes evaluated once whose results were not kept
}

type memoEntry struct {
	key     [sha256.Size]byte // the full key of the evaluation this is the result of
	value   ast.Value
	defined bool
	expires time.Time
}

func newMemo(size int) *memo {
	return &memo{entries: sizedlru.New[uint64, memoEntry](memoBytes, memoEntryBytes), seen: lru.New(size)}
}

// get returns the entry under pre whose full key is key() (computed only when there is
// an entry under pre).
func (m *memo) get(pre uint64, key func() [sha256.Size]byte, now time.Time) (memoEntry, bool) {
	e, ok := m.entries.Get(pre)
	if !ok {
		return memoEntry{}, false
	}
	if !now.Before(e.expires) {
		m.entries.Remove(pre)
		return memoEntry{}, false
	}
	if e.key != key() {
		return memoEntry{}, false // another evaluation with the same prehash
	}
	return e, true
}

// add keeps e (with its full key, key()) when pre was evaluated before, and otherwise
// remembers that it was.
func (m *memo) add(pre uint64, key func() [sha256.Size]byte, e memoEntry) {
	if _, again := m.seen.Get(pre); !again {
		m.seen.Add(pre, struct{}{})
		return
	}
	m.seen.Remove(pre)
	var size int64 = memoEntryExtra
	if e.value != nil {
		size += astjson.Size(e.value)
	}
	e.key = key()
	m.entries.Add(pre, e, size)
}

// prehashSeed makes memoPrehash the same function for the process's life.
var prehashSeed = maphash.MakeSeed()

// memoPrehash hashes what memoKey encodes, from the hashes OPA's values carry (an
// object's and an array's are kept as they are built): equal inputs give equal
// prehashes, unequal ones rarely, and a memo entry is used only on its full key.
func memoPrehash(path []string, salt []byte, fp footprint, input ast.Value) uint64 {
	var h maphash.Hash
	h.SetSeed(prehashSeed)
	for _, seg := range path {
		h.WriteString(seg)
		h.WriteByte(0)
	}
	h.Write(salt)
	var b [9]byte
	fp.eachValue(input, func(v ast.Value) {
		if v == nil {
			b[8] = 0 // absent
		} else {
			binary.LittleEndian.PutUint64(b[:8], uint64(v.Hash()))
			b[8] = 1
		}
		h.Write(b[:])
	})
	return h.Sum64()
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
// input (absent where input has none).
func (fp footprint) appendValues(b []byte, input ast.Value) []byte {
	fp.eachValue(input, func(v ast.Value) { b = astjson.AppendCanonical(b, v) })
	return b
}

// eachValue calls f with the value at each of fp's paths in input (nil where input has
// none). The value at the prefix a path shares with the one before it is reused, not
// looked up again from the root: the paths of one policy mostly start alike
// (input.pod.spec...).
func (fp footprint) eachValue(input ast.Value, f func(ast.Value)) {
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
		f(v)
	}
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
	if input, err = e.withSharedProof(ctx, path, input, m); err != nil {
		return Result{Memo: MemoOff}, err
	}
	if m.Salt == nil || !p.footprint.memoisable() {
		v, defined, err := e.evalQuery(ctx, path, p, input)
		return Result{Value: v, Defined: defined, Memo: MemoOff}, err
	}
	pre := memoPrehash(path, m.Salt, p.footprint, input)
	var full *[sha256.Size]byte
	key := func() [sha256.Size]byte { // computed once, and only if needed
		if full == nil {
			k := memoKey(path, m.Salt, p.footprint, input)
			full = &k
		}
		return *full
	}
	now := time.Now()
	if hit, ok := e.memo.get(pre, key, now); ok {
		return Result{Value: hit.value, Defined: hit.defined, Memo: MemoHit}, nil
	}
	v, defined, err := e.evalQuery(ctx, path, p, input)
	if err != nil {
		return Result{Memo: MemoMiss}, err
	}
	if now.Before(m.Expires) {
		e.memo.add(pre, key, memoEntry{value: v, defined: defined, expires: m.Expires})
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
