package main

import (
	"io"
	"strings"
	"testing"
	"time"
)

func TestParseOptions(t *testing.T) {
	valid := []string{"--binary", "linux/amd64=bin/x", "--tag", "v1", "--version", "v1", "--revision", "abc", "--oci-archive", "out.tar"}
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{name: "valid", args: valid},
		{name: "no binary", args: valid[2:], wantErr: "--binary is required"},
		{name: "binary without platform", args: append([]string{"--binary", "bin/x"}, valid[2:]...), wantErr: "want os/arch=path"},
		{name: "binary without path", args: append([]string{"--binary", "linux/amd64="}, valid[2:]...), wantErr: "want os/arch=path"},
		{name: "no tag", args: []string{"--binary", "linux/amd64=bin/x", "--version", "v1", "--revision", "abc", "--oci-archive", "o"}, wantErr: "--tag, --version and --revision are required"},
		{name: "no output", args: valid[:8], wantErr: "nothing to write"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseOptions(tt.args, io.Discard)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestCreatedTime(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Time
		wantErr bool
	}{
		{in: "2026-11-23T10:00:00Z", want: time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)},
		{in: "1700000000", want: time.Unix(1700000000, 0).UTC()},
		{in: "yesterday", wantErr: true},
	}
	for _, tt := range tests {
		got, err := createdTime(tt.in)
		if (err != nil) != tt.wantErr || (!tt.wantErr && !got.Equal(tt.want)) {
			t.Errorf("createdTime(%q) = %v, %v; want %v (error %v)", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}
