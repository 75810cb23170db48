package policies

import (
	"flag"
	"fmt"
	"hash/fnv"
	"testing"
)

// The sameness and property tests (precompute against the general rules, site rules,
// memo) compare thousands of evaluations. What they
// check is the policy's logic, not concurrency, and the race detector makes each
// evaluation about 8 times slower: under -race a full corpus took the package past go
// test's 10 minutes on 2 cores. So make unit runs them twice: under -race each loop
// compares a sample (a different twentieth for every data set and document, so that
// together they still touch every input), and without the race detector
// (-corpus=full, the default there) every input of every loop.
var corpus = flag.String("corpus", "", `how much of the heavy tests' corpora to compare: "full" or "sample" (default: "sample" under -race, else "full")`)

// corpusSampleEvery is how sparse a sample is: one input in this many.
const corpusSampleEvery = 20

// corpusStride is 1 for the full corpus and corpusSampleEvery for a sample.
func corpusStride(t testing.TB) int {
	t.Helper()
	return corpusStrideEvery(t, corpusSampleEvery)
}

// corpusStrideEvery is 1 for the full corpus and every for a sample: a loop whose
// checks need more of its corpus than the heavy tests' sample samples more densely.
func corpusStrideEvery(t testing.TB, every int) int {
	t.Helper()
	switch *corpus {
	case "full":
		return 1
	case "sample":
		return every
	case "":
		if raceEnabled {
			return every
		}
		return 1
	}
	t.Fatalf("-corpus=%q: want full or sample", *corpus)
	return 1
}

// inCorpus says whether input i of the loop named by the parts is compared in this run.
func inCorpus(t testing.TB, i int, parts ...any) bool {
	t.Helper()
	return inCorpusEvery(t, corpusSampleEvery, i, parts...)
}

// inCorpusEvery is inCorpus for a sample of one input in every.
func inCorpusEvery(t testing.TB, every, i int, parts ...any) bool {
	t.Helper()
	stride := corpusStrideEvery(t, every)
	if stride == 1 {
		return true
	}
	h := fnv.New32a()
	fmt.Fprint(h, parts...)
	return (i+int(h.Sum32()%uint32(stride)))%stride == 0
}

func TestInCorpus(t *testing.T) {
	// A sample keeps one in corpusSampleEvery of a loop, and the loops' samples differ.
	if corpusStride(t) == 1 {
		t.Skip("full corpus: every input is compared")
	}
	seen := map[int]bool{}
	for loop := range 40 {
		kept := 0
		for i := range 100 {
			if inCorpus(t, i, "loop", loop) {
				kept++
				seen[i] = true
			}
		}
		if kept != 100/corpusSampleEvery {
			t.Errorf("loop %d kept %d of 100", loop, kept)
		}
	}
	if len(seen) != 100 {
		t.Errorf("40 loops together compared %d of 100 inputs", len(seen))
	}
}
