package cache

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"strings"
	"time"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sar-bridge/sar-bridge/internal/hotreload"
)

// MinKeySize is the shortest HMAC key accepted, in bytes: SHA-256's output size.
const MinKeySize = 32

// maxKeys bounds the keys of a file: a forged value is checked against each of them.
const maxKeys = 16

// Keyring holds the HMAC-SHA256 keys of memcached values: the first signs, all verify,
// so a key can be rotated in without a replica that has not seen it yet missing.
// It never prints its keys.
type Keyring struct {
	keys [][]byte
}

// KeySource returns the keys in force; *Keyring and a reloaded key file are both one.
type KeySource interface {
	Current() *Keyring
}

// NewKeyring returns a Keyring of keys, the first of which signs.
func NewKeyring(keys ...[]byte) (*Keyring, error) {
	if len(keys) == 0 {
		return nil, errors.New("no HMAC key")
	}
	if len(keys) > maxKeys {
		return nil, fmt.Errorf("%d HMAC keys: at most %d", len(keys), maxKeys)
	}
	k := &Keyring{keys: make([][]byte, len(keys))}
	for i, key := range keys {
		if len(key) < MinKeySize {
			return nil, fmt.Errorf("HMAC key %d has %d bytes: want at least %d", i+1, len(key), MinKeySize)
		}
		k.keys[i] = bytes.Clone(key)
	}
	return k, nil
}

// ParseKeys reads a key file: one key per line, hex or base64 (of at least MinKeySize
// bytes), the first signing; blank lines and lines starting with # are skipped. Errors
// name the line, never its content.
func ParseKeys(data []byte) (*Keyring, error) {
	var keys [][]byte
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, ok := decodeKey(line)
		if !ok {
			return nil, fmt.Errorf("line %d: not a hex or base64 key", i+1)
		}
		if len(key) < MinKeySize {
			return nil, fmt.Errorf("line %d: key of %d bytes, want at least %d", i+1, len(key), MinKeySize)
		}
		keys = append(keys, key)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("no key: want one hex or base64 key of at least %d bytes per line (openssl rand -hex 32)", MinKeySize)
	}
	return NewKeyring(keys...)
}

// decodeKey reads hex first: a hex string is valid base64 too, but not the other way.
func decodeKey(s string) ([]byte, bool) {
	if b, err := hex.DecodeString(s); err == nil {
		return b, true
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			return b, true
		}
	}
	return nil, false
}

// Current returns k, so a fixed Keyring is a KeySource.
func (k *Keyring) Current() *Keyring { return k }

// Len returns the number of keys.
func (k *Keyring) Len() int { return len(k.keys) }

// String says how many keys there are, never what they are.
func (k *Keyring) String() string { return fmt.Sprintf("%d HMAC key(s)", len(k.keys)) }

// GoString is String, so %#v does not print the keys either.
func (k *Keyring) GoString() string { return k.String() }

func (k *Keyring) sign(parts ...[]byte) []byte {
	return mac(k.keys[0], parts)
}

// verify compares sum with every key's MAC in constant time.
func (k *Keyring) verify(sum []byte, parts ...[]byte) bool {
	ok := false
	for _, key := range k.keys {
		// No early return: the time taken does not say which key matched.
		ok = hmac.Equal(sum, mac(key, parts)) || ok
	}
	return ok
}

func mac(key []byte, parts [][]byte) []byte {
	h := hmac.New(sha256.New, key)
	for _, p := range parts {
		h.Write(p)
	}
	return h.Sum(nil)
}

// KeyFileOptions configures LoadKeyFile.
type KeyFileOptions struct {
	Path string
	// Interval is how often the file is checked for changes (a Secret update).
	Interval   time.Duration
	Logger     log.Logger
	Registerer prometheus.Registerer
}

// LoadKeyFile reads the key file and re-reads it every opts.Interval until ctx ends;
// a broken change is rejected (logged, counted in
// sar_bridge_memcached_hmac_keys_reloads_total) and the last good keys stay in force.
func LoadKeyFile(ctx context.Context, opts KeyFileOptions) (*hotreload.Value[*Keyring], error) {
	v, err := hotreload.New(ctx, hotreload.Options[*Keyring]{
		Name:            "memcached_hmac_keys",
		ReloadsHelp:     "Reloads of --memcached.hmac-key-file by result (success, failure).",
		LastSuccessHelp: "1 when the last check of --memcached.hmac-key-file loaded it (or found it unchanged), 0 when it was rejected.",
		Interval:        opts.Interval,
		Logger:          opts.Logger,
		Component:       "memcached",
		LogKeyvals:      []any{"file", opts.Path},
		Reloaded:        "memcached HMAC keys reloaded",
		Rejected:        "memcached HMAC key file rejected; the last good keys stay in force",
		Restored:        "memcached HMAC key file back to the keys in force",
		Describe:        func(k *Keyring) []any { return []any{"keys", k.Len()} },
		Registerer:      opts.Registerer,
		Settle:          true,
	}, func(*Keyring) (hotreload.Snapshot[*Keyring], error) {
		data, err := os.ReadFile(opts.Path)
		if err != nil {
			return hotreload.Snapshot[*Keyring]{}, fmt.Errorf("reading HMAC key file: %w", err)
		}
		return hotreload.Snapshot[*Keyring]{
			Fingerprint: sha256.Sum256(data),
			Build: func(context.Context) (*Keyring, error) {
				k, err := ParseKeys(data)
				if err != nil {
					return nil, fmt.Errorf("HMAC key file %s: %w", opts.Path, err)
				}
				return k, nil
			},
		}, nil
	})
	if err != nil {
		return nil, err
	}
	return v, nil
}

// memcachedKeyPrefix names the key derivation and the value formats below: change it
// with either, so replicas of different versions never read each other's entries.
const memcachedKeyPrefix = "sarb2-"

// MemcachedKey is the memcached key of key for the cluster clusterID: a hash of both,
// so bridges of different clusters sharing one memcached never meet.
func MemcachedKey(clusterID, key string) string {
	h := sha256.New()
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(clusterID)))
	h.Write(n[:])
	h.Write([]byte(clusterID))
	h.Write([]byte(key))
	return memcachedKeyPrefix + hex.EncodeToString(h.Sum(nil))
}

// Stored values are a header, a seal, then the caller's value:
//
//	format (1 byte) | written at (8, Unix ns, big endian) | expiry (8, Unix ns) | seal | value
//
// The seal is an HMAC-SHA256 (32 bytes) over a domain string, the cluster identity, the
// memcached key, the header and the value when keys are configured (format 3), or a
// CRC-32C (4 bytes) of the same when running unsigned (format 2), which only catches
// accidents. A value of one format is never read as the other.
const (
	formatUnsigned = 2
	formatSigned   = 3
	headerSize     = 1 + 8 + 8
	crcSize        = 4
	macSize        = sha256.Size
	sealDomain     = "sar-bridge memcached value\x00"
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// stamp is what a writer says about its value: when it was written and until when it
// may be used. The reader trusts neither beyond its own TTLs.
type stamp struct {
	writtenAt, expiry time.Time
}

// SealValue returns value as stored under MemcachedKey(clusterID, key): signed with
// keys' first key, or checksummed only when keys is nil.
func SealValue(keys *Keyring, clusterID, key string, value []byte, writtenAt, expiry time.Time) []byte {
	return seal(keys, clusterID, MemcachedKey(clusterID, key), value, stamp{writtenAt, expiry})
}

func seal(keys *Keyring, clusterID, mkey string, value []byte, s stamp) []byte {
	sealSize, format := crcSize, byte(formatUnsigned)
	if keys != nil {
		sealSize, format = macSize, formatSigned
	}
	b := make([]byte, headerSize+sealSize+len(value))
	b[0] = format
	binary.BigEndian.PutUint64(b[1:9], uint64(s.writtenAt.UnixNano()))
	binary.BigEndian.PutUint64(b[9:17], uint64(s.expiry.UnixNano()))
	copy(b[headerSize+sealSize:], value)
	parts := sealedParts(clusterID, mkey, b[:headerSize], value)
	if keys != nil {
		copy(b[headerSize:], keys.sign(parts...))
	} else {
		binary.BigEndian.PutUint32(b[headerSize:], checksum(parts))
	}
	return b
}

// unseal returns the value and stamp of b if its seal holds for this cluster and key:
// keys must have signed it, or, when keys is nil, it must be an unsigned value whose
// checksum matches.
func unseal(keys *Keyring, clusterID, mkey string, b []byte) (value []byte, s stamp, ok bool) {
	sealSize, format := crcSize, byte(formatUnsigned)
	if keys != nil {
		sealSize, format = macSize, formatSigned
	}
	if len(b) < headerSize+sealSize || b[0] != format {
		return nil, stamp{}, false
	}
	sum, value := b[headerSize:headerSize+sealSize], b[headerSize+sealSize:]
	parts := sealedParts(clusterID, mkey, b[:headerSize], value)
	if keys != nil {
		ok = keys.verify(sum, parts...)
	} else {
		ok = binary.BigEndian.Uint32(sum) == checksum(parts)
	}
	if !ok {
		return nil, stamp{}, false
	}
	return value, stamp{
		writtenAt: time.Unix(0, int64(binary.BigEndian.Uint64(b[1:9]))),
		expiry:    time.Unix(0, int64(binary.BigEndian.Uint64(b[9:17]))),
	}, true
}

// sealedParts lists what a seal covers; lengths make the concatenation unambiguous.
func sealedParts(clusterID, mkey string, header, value []byte) [][]byte {
	var lens [8]byte
	binary.BigEndian.PutUint32(lens[0:4], uint32(len(clusterID)))
	binary.BigEndian.PutUint32(lens[4:8], uint32(len(mkey)))
	return [][]byte{[]byte(sealDomain), lens[:], []byte(clusterID), []byte(mkey), header, value}
}

func checksum(parts [][]byte) uint32 {
	var crc uint32
	for _, p := range parts {
		crc = crc32.Update(crc, crcTable, p)
	}
	return crc
}
