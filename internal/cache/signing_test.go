package cache

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sar-bridge/sar-bridge/internal/hotreload/hotreloadtest"
)

// testKey is a fixed 32-byte key per seed.
func testKey(seed int) []byte {
	sum := sha256.Sum256([]byte(fmt.Sprintf("sar-bridge test key %d", seed)))
	return sum[:]
}

// testKeys is a Keyring of the keys of seeds, the first signing.
func testKeys(tb testing.TB, seeds ...int) *Keyring {
	tb.Helper()
	keys := make([][]byte, len(seeds))
	for i, s := range seeds {
		keys[i] = testKey(s)
	}
	k, err := NewKeyring(keys...)
	if err != nil {
		tb.Fatal(err)
	}
	return k
}

func TestParseKeys(t *testing.T) {
	k1, k2 := testKey(1), testKey(2)
	tests := []struct {
		name    string
		data    string
		want    [][]byte
		wantErr string
	}{
		{name: "hex", data: hex.EncodeToString(k1) + "\n", want: [][]byte{k1}},
		{name: "upper-case hex", data: strings.ToUpper(hex.EncodeToString(k1)), want: [][]byte{k1}},
		{name: "base64", data: base64.StdEncoding.EncodeToString(k1), want: [][]byte{k1}},
		{name: "base64 without padding", data: base64.RawStdEncoding.EncodeToString(k1), want: [][]byte{k1}},
		{name: "url-safe base64", data: base64.URLEncoding.EncodeToString(k2), want: [][]byte{k2}},
		{
			name: "comments, blanks, CRLF and two keys in order",
			data: "# new key signs\r\n" + hex.EncodeToString(k2) + "\r\n\n  # old key verifies\n  " + base64.StdEncoding.EncodeToString(k1) + "  \n",
			want: [][]byte{k2, k1},
		},
		{name: "longer key", data: hex.EncodeToString(append(bytes.Clone(k1), k2...)), want: [][]byte{append(bytes.Clone(k1), k2...)}},
		{name: "empty", data: "", wantErr: "no key: want one hex or base64 key of at least 32 bytes per line"},
		{name: "comments only", data: "# nothing\n\n", wantErr: "no key"},
		{name: "too short", data: "# c\n" + hex.EncodeToString(k1[:31]), wantErr: "line 2: key of 31 bytes, want at least 32"},
		{name: "not hex nor base64", data: hex.EncodeToString(k1) + "\n" + "not a key!", wantErr: "line 2: not a hex or base64 key"},
		{name: "odd hex read as base64 is too short", data: "abc", wantErr: "line 1:"},
		{name: "too many", data: strings.Repeat(hex.EncodeToString(k1)+"\n", maxKeys+1), wantErr: "17 HMAC keys: at most 16"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := ParseKeys([]byte(tt.data))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseKeys err = %v, want %q", err, tt.wantErr)
				}
				// Errors go to logs: never a key's text.
				for _, line := range strings.Split(tt.data, "\n") {
					if line = strings.TrimSpace(line); len(line) > 2 && !strings.HasPrefix(line, "#") && strings.Contains(err.Error(), line) {
						t.Errorf("error %q quotes the file's line %q", err, line)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if k.Len() != len(tt.want) {
				t.Fatalf("%d keys, want %d", k.Len(), len(tt.want))
			}
			for i := range tt.want {
				if !bytes.Equal(k.keys[i], tt.want[i]) {
					t.Errorf("key %d differs", i+1)
				}
			}
		})
	}
}

func TestKeyringNeverPrintsKeys(t *testing.T) {
	k := testKeys(t, 1, 2)
	for _, format := range []string{"%v", "%+v", "%#v", "%s", "%q"} {
		out := fmt.Sprintf(format, k)
		for _, key := range [][]byte{testKey(1), testKey(2)} {
			if strings.Contains(out, hex.EncodeToString(key)) || strings.Contains(out, fmt.Sprint(key)) || strings.Contains(out, string(key[:8])) {
				t.Errorf("Sprintf(%q) = %q shows a key", format, out)
			}
		}
		if !strings.Contains(out, "2 HMAC key(s)") {
			t.Errorf("Sprintf(%q) = %q, want the key count", format, out)
		}
	}
}

func TestMemcachedKeyScoping(t *testing.T) {
	const key = "sarb1-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	tests := []struct {
		name               string
		clusterA, keyA     string
		clusterB, keyB     string
		same               bool
		wantValidKeyLength int
	}{
		{name: "same cluster, same key", clusterA: "uid-1", keyA: key, clusterB: "uid-1", keyB: key, same: true},
		{name: "other cluster", clusterA: "uid-1", keyA: key, clusterB: "uid-2", keyB: key},
		{name: "other key", clusterA: "uid-1", keyA: key, clusterB: "uid-1", keyB: key + "0"},
		{name: "boundary between cluster and key", clusterA: "ab", keyA: "c", clusterB: "a", keyB: "bc"},
		{name: "keys memcached would refuse", clusterA: "cluster with spaces\r\n", keyA: strings.Repeat("k", 400), clusterB: "x", keyB: "a b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := MemcachedKey(tt.clusterA, tt.keyA), MemcachedKey(tt.clusterB, tt.keyB)
			if (a == b) != tt.same {
				t.Fatalf("MemcachedKey(%q, %q) = %q, MemcachedKey(%q, %q) = %q; want same = %v", tt.clusterA, tt.keyA, a, tt.clusterB, tt.keyB, b, tt.same)
			}
			for _, k := range []string{a, b} {
				if !strings.HasPrefix(k, memcachedKeyPrefix) || len(k) != len(memcachedKeyPrefix)+64 || strings.ContainsAny(k, " \r\n\t") {
					t.Errorf("key %q: want %s + 64 hex digits", k, memcachedKeyPrefix)
				}
			}
			if MemcachedKey(tt.clusterA, tt.keyA) != a {
				t.Error("not deterministic")
			}
		})
	}
}

func TestSealRoundTrip(t *testing.T) {
	writtenAt, expiry := time.Unix(1700000000, 123456789), time.Unix(1700000300, 987654321)
	tests := []struct {
		name  string
		keys  *Keyring
		value []byte
	}{
		{name: "signed json", keys: testKeys(t, 1), value: []byte(`{"v":1,"a":true,"r":"RBAC: allowed"}`)},
		{name: "signed empty", keys: testKeys(t, 1), value: []byte{}},
		{name: "signed binary", keys: testKeys(t, 1, 2), value: []byte{0, 1, 0xff, '\r', '\n'}},
		{name: "unsigned json", value: []byte(`{"v":1,"d":true}`)},
		{name: "unsigned empty", value: []byte{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mkey := MemcachedKey("c", "k")
			b := seal(tt.keys, "c", mkey, tt.value, stamp{writtenAt, expiry})
			v, s, ok := unseal(tt.keys, "c", mkey, b)
			if !ok || !bytes.Equal(v, tt.value) || !s.writtenAt.Equal(writtenAt) || !s.expiry.Equal(expiry) {
				t.Fatalf("unseal = %q, %v, %v; want %q, %v, %v", v, s, ok, tt.value, writtenAt, expiry)
			}
		})
	}
}

// Every way to get an answer into memcached without this cluster's keys is a miss,
// counted as forged, never an error.
func TestOpenRejectsForgeries(t *testing.T) {
	const cluster, key = "cluster-a", "sarb1-allowed"
	now := time.Now()
	allowed := []byte(`{"v":1,"a":true}`)
	keys := testKeys(t, 1)
	mkey := MemcachedKey(cluster, key)
	good := seal(keys, cluster, mkey, allowed, stamp{now, now.Add(time.Minute)})
	flip := func(i int) []byte { b := bytes.Clone(good); b[i] ^= 1; return b }
	outcome := headerSize + macSize + bytes.Index(allowed, []byte("true"))
	tests := []struct {
		name string
		b    []byte
	}{
		{name: "signed with another key", b: seal(testKeys(t, 2), cluster, mkey, allowed, stamp{now, now.Add(time.Minute)})},
		{name: "truncated MAC", b: append(bytes.Clone(good[:headerSize+macSize-1]), allowed...)},
		{name: "MAC cut off", b: append(bytes.Clone(good[:headerSize]), allowed...)},
		{name: "flipped outcome byte", b: flip(outcome)},
		{name: "flipped MAC byte", b: flip(headerSize)},
		{name: "flipped write time", b: flip(3)},
		{name: "flipped expiry", b: flip(12)},
		{name: "replay of an allowed value under another key", b: seal(keys, cluster, MemcachedKey(cluster, "sarb1-other"), allowed, stamp{now, now.Add(time.Minute)})},
		{name: "another cluster's value", b: seal(keys, "cluster-b", mkey, allowed, stamp{now, now.Add(time.Minute)})},
		{name: "unsigned value", b: seal(nil, cluster, mkey, allowed, stamp{now, now.Add(time.Minute)})},
		{name: "format byte changed to unsigned", b: append([]byte{formatUnsigned}, good[1:]...)},
		{name: "extra byte", b: append(bytes.Clone(good), 'x')},
		{name: "truncated value", b: good[:len(good)-1]},
		{name: "shorter than the header", b: good[:headerSize-1]},
		{name: "raw caller value", b: allowed},
		{name: "nil", b: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &Memcached{clusterID: cluster, keys: keys, limited: newLimitedLogger(&logRecorder{}, time.Hour)}
			v, remaining, r := m.open(mkey, tt.b, now)
			if r != resultForged || v != nil || remaining != 0 {
				t.Fatalf("open = %q, %v, result %d; want a forged miss", v, remaining, r)
			}
		})
	}
	t.Run("a key source without keys trusts nothing", func(t *testing.T) {
		m := &Memcached{clusterID: cluster, keys: (*Keyring)(nil)}
		if _, _, r := m.open(mkey, good, now); r != resultForged {
			t.Fatalf("result %d, want forged", r)
		}
		if err := m.Set(context.Background(), key, allowed, time.Minute); err == nil || !strings.Contains(err.Error(), "no HMAC key in force") {
			t.Fatalf("Set err = %v, want a refusal", err)
		}
	})
	t.Run("the untouched value is a hit", func(t *testing.T) {
		m := &Memcached{clusterID: cluster, keys: keys}
		if v, _, r := m.open(mkey, good, now); r != resultHit || !bytes.Equal(v, allowed) {
			t.Fatalf("open = %q, result %d; want a hit", v, r)
		}
	})
}

// Unsigned (insecure) replicas catch accidents and never read signed values; a failed
// check is a plain miss, as nothing claims to be signed.
func TestOpenUnsigned(t *testing.T) {
	now := time.Now()
	mkey := MemcachedKey("c", "k")
	good := seal(nil, "c", mkey, []byte("v"), stamp{now, now.Add(time.Minute)})
	tests := []struct {
		name string
		b    []byte
		want result
	}{
		{name: "unsigned", b: good, want: resultHit},
		{name: "corrupted", b: append(bytes.Clone(good[:len(good)-1]), 'w'), want: resultMiss},
		{name: "signed", b: seal(testKeys(t, 1), "c", mkey, []byte("v"), stamp{now, now.Add(time.Minute)}), want: resultMiss},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &Memcached{clusterID: "c", limited: newLimitedLogger(&logRecorder{}, time.Hour)}
			if _, _, r := m.open(mkey, tt.b, now); r != tt.want {
				t.Fatalf("result %d, want %d", r, tt.want)
			}
		})
	}
}

// The life of a hit is this replica's, whatever its writer stamped on it.
func TestOpenCapsAtOwnTTL(t *testing.T) {
	const allowedTTL, deniedTTL = 5 * time.Minute, 30 * time.Second
	maxAge := func(v []byte) time.Duration {
		switch string(v) {
		case "allowed":
			return allowedTTL
		case "denied":
			return deniedTTL
		}
		return 0
	}
	now := time.Unix(1800000000, 0)
	year := 365 * 24 * time.Hour
	tests := []struct {
		name          string
		value         string
		age           time.Duration // now - written at
		expiresIn     time.Duration // expiry - now
		noMaxAge      bool
		wantHit       bool
		wantRemaining time.Duration
	}{
		{name: "fresh allow: this replica's TTL", value: "allowed", age: 0, expiresIn: year, wantHit: true, wantRemaining: allowedTTL},
		{name: "expiry a year away, past the allowed TTL", value: "allowed", age: allowedTTL + time.Nanosecond, expiresIn: year},
		{name: "expiry a year away, at the allowed TTL", value: "allowed", age: allowedTTL, expiresIn: year},
		{name: "expiry a year away, just within", value: "allowed", age: allowedTTL - time.Second, expiresIn: year, wantHit: true, wantRemaining: time.Second},
		{name: "denial past the denied TTL", value: "denied", age: deniedTTL + time.Millisecond, expiresIn: year},
		{name: "denial within", value: "denied", age: 10 * time.Second, expiresIn: year, wantHit: true, wantRemaining: 20 * time.Second},
		{name: "writer's shorter expiry wins", value: "allowed", age: time.Second, expiresIn: 3 * time.Second, wantHit: true, wantRemaining: 3 * time.Second},
		{name: "writer's expiry passed", value: "allowed", age: time.Second, expiresIn: -time.Nanosecond},
		{name: "value this replica would not keep", value: "other", age: 0, expiresIn: year},
		{name: "clock slightly ahead", value: "allowed", age: -500 * time.Millisecond, expiresIn: year, wantHit: true, wantRemaining: allowedTTL},
		{name: "written in the future", value: "allowed", age: -time.Hour, expiresIn: year},
		{name: "no MaxAge: the writer's expiry", value: "allowed", age: time.Hour, expiresIn: time.Minute, noMaxAge: true, wantHit: true, wantRemaining: time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keys := testKeys(t, 1)
			m := &Memcached{clusterID: "c", keys: keys, maxAge: maxAge, limited: newLimitedLogger(&logRecorder{}, time.Hour)}
			if tt.noMaxAge {
				m.maxAge = nil
			}
			mkey := MemcachedKey("c", "k")
			b := seal(keys, "c", mkey, []byte(tt.value), stamp{writtenAt: now.Add(-tt.age), expiry: now.Add(tt.expiresIn)})
			v, remaining, r := m.open(mkey, b, now)
			if hit := r == resultHit; hit != tt.wantHit {
				t.Fatalf("open = %q, %v, result %d; want hit = %v", v, remaining, r, tt.wantHit)
			}
			if tt.wantHit && remaining != tt.wantRemaining {
				t.Errorf("remaining = %v, want %v", remaining, tt.wantRemaining)
			}
			if !tt.wantHit && r != resultMiss {
				t.Errorf("result %d, want a plain miss (a genuine value, only old)", r)
			}
		})
	}
}

// Rotation: a replica that has the new key second still reads what the others sign
// with it first; one that never got the new key cannot (hence the three steps).
func TestKeyRotation(t *testing.T) {
	now := time.Now()
	mkey := MemcachedKey("c", "k")
	steps := []struct {
		name           string
		writer, reader *Keyring
		wantHit        bool
	}{
		{name: "old signs, reader has old", writer: testKeys(t, 1), reader: testKeys(t, 1), wantHit: true},
		{name: "old signs, reader has new then old", writer: testKeys(t, 1), reader: testKeys(t, 2, 1), wantHit: true},
		{name: "old signs, reader has old then new", writer: testKeys(t, 1), reader: testKeys(t, 1, 2), wantHit: true},
		{name: "new signs, reader has old then new", writer: testKeys(t, 2, 1), reader: testKeys(t, 1, 2), wantHit: true},
		{name: "new signs, reader has new only", writer: testKeys(t, 2, 1), reader: testKeys(t, 2), wantHit: true},
		{name: "new signs, reader has old only", writer: testKeys(t, 2, 1), reader: testKeys(t, 1)},
		{name: "old signs, old removed", writer: testKeys(t, 1), reader: testKeys(t, 2)},
	}
	for _, tt := range steps {
		t.Run(tt.name, func(t *testing.T) {
			b := seal(tt.writer, "c", mkey, []byte("v"), stamp{now, now.Add(time.Minute)})
			m := &Memcached{clusterID: "c", keys: tt.reader, limited: newLimitedLogger(&logRecorder{}, time.Hour)}
			if _, _, r := m.open(mkey, b, now); (r == resultHit) != tt.wantHit {
				t.Fatalf("result %d, want hit = %v", r, tt.wantHit)
			}
		})
	}
}

func TestNewMemcachedRefusesUnsafeOptions(t *testing.T) {
	keys := testKeys(t, 1)
	tests := []struct {
		name    string
		opts    MemcachedOptions
		wantErr string
	}{
		{name: "no keys", opts: MemcachedOptions{ClusterID: "c"}, wantErr: "memcached: no HMAC keys: unsigned values can be forged"},
		{name: "no cluster identity", opts: MemcachedOptions{Keys: keys}, wantErr: "no cluster identity"},
		{name: "keys and unsigned", opts: MemcachedOptions{ClusterID: "c", Keys: keys, InsecureUnsigned: true}, wantErr: "exclude each other"},
		{name: "nil keyring", opts: MemcachedOptions{ClusterID: "c", Keys: (*Keyring)(nil)}, wantErr: "empty HMAC key source"},
		{name: "keys", opts: MemcachedOptions{ClusterID: "c", Keys: keys}},
		{name: "unsigned when insisted", opts: MemcachedOptions{ClusterID: "c", InsecureUnsigned: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.Servers = []string{"127.0.0.1:1"}
			m, err := NewMemcached(context.Background(), tt.opts)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				m.Close()
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

// The key file is re-read when it changes; a broken change keeps the last good keys
// and its log line never shows a key.
func TestLoadKeyFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "keys")
	write := func(data string) {
		t.Helper()
		// Rename over the file, as a Secret update swaps a symlink: never half written.
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	h1, h2 := hex.EncodeToString(testKey(1)), hex.EncodeToString(testKey(2))
	write(h1 + "\n")
	logs := &hotreloadtest.SyncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	v, err := LoadKeyFile(ctx, KeyFileOptions{Path: path, Interval: 5 * time.Millisecond, Logger: log.NewLogfmtLogger(logs), Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	signsWith := func(seed int) bool {
		b := seal(v.Current(), "c", "k", nil, stamp{})
		_, _, ok := unseal(testKeys(t, seed), "c", "k", b)
		return ok
	}
	if !signsWith(1) || v.Current().Len() != 1 {
		t.Fatalf("keys at start = %v, want key 1 signing", v.Current())
	}

	steps := []struct {
		name   string
		data   string
		reject bool
		signer int
		keys   int
	}{
		{name: "new key added second", data: h1 + "\n" + h2 + "\n", signer: 1, keys: 2},
		{name: "new key first", data: "# rotated\n" + h2 + "\n" + h1 + "\n", signer: 2, keys: 2},
		{name: "broken change keeps the last good keys", data: h2 + "\n" + h1[:40] + "\n", reject: true, signer: 2, keys: 2},
		{name: "old key removed", data: h2 + "\n", signer: 2, keys: 1},
	}
	for _, s := range steps {
		gen, failures := v.Generation(), hotreloadtest.Failures(v)
		write(s.data)
		if s.reject {
			hotreloadtest.WaitFor(t, s.name, func() bool { return hotreloadtest.Failures(v) > failures }, logs)
		} else {
			hotreloadtest.WaitFor(t, s.name, func() bool { return v.Generation() > gen }, logs)
		}
		if !signsWith(s.signer) || v.Current().Len() != s.keys {
			t.Fatalf("%s: keys = %v; want %d with key %d signing", s.name, v.Current(), s.keys, s.signer)
		}
	}
	hotreloadtest.CheckMetrics(t, v, 3, 1, 1)
	out := logs.String()
	if strings.Contains(out, h1[:16]) || strings.Contains(out, h2[:16]) {
		t.Errorf("the log shows a key:\n%s", out)
	}
	if n := strings.Count(out, "memcached HMAC key file rejected"); n != 1 {
		t.Errorf("%d rejection lines, want 1:\n%s", n, out)
	}
	if !strings.Contains(out, "line 2: not a hex or base64 key") && !strings.Contains(out, "line 2: key of 20 bytes") {
		t.Errorf("the rejection does not say which line is wrong:\n%s", out)
	}
}

// A missing file stops start-up with a reason.
func TestLoadKeyFileMissing(t *testing.T) {
	_, err := LoadKeyFile(context.Background(), KeyFileOptions{Path: filepath.Join(t.TempDir(), "absent")})
	if err == nil || !strings.Contains(err.Error(), "reading HMAC key file") {
		t.Fatalf("err = %v", err)
	}
}
