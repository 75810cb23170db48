package slurmjob

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseSingularityArgs(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    ContainerArgs
		wantErr string
	}{
		{in: "", want: ContainerArgs{}},
		{in: "--bind /scratch/a:/data", want: ContainerArgs{Options: []string{"--bind"}, Sources: []string{"/scratch/a"}}},
		{in: "--bind=/a,/b:/b:ro,/c/./d/:/d", want: ContainerArgs{Options: []string{"--bind"}, Sources: []string{"/a", "/b", "/c/d"}}},
		{in: "-B /a:/x -B/b -B=/c", want: ContainerArgs{Options: []string{"--bind", "--bind", "--bind"}, Sources: []string{"/a", "/b", "/c"}}},
		{in: "--nv --cleanenv -e --bind /a", want: ContainerArgs{Options: []string{"--nv", "--cleanenv", "--cleanenv", "--bind"}, Sources: []string{"/a"}}},
		{in: "--mount type=bind,src=/s,dst=/d", want: ContainerArgs{Options: []string{"--mount"}, Sources: []string{"/s"}}},
		{in: "--mount=type=bind,source=/s,destination=/d,ro", want: ContainerArgs{Options: []string{"--mount"}, Sources: []string{"/s"}}},
		{in: "--home /home/u:/home/u -W /tmp/w --overlay /o.img:ro --env-file /e", want: ContainerArgs{
			Options: []string{"--home", "--workdir", "--overlay", "--env-file"}, Sources: []string{"/home/u", "/tmp/w", "/o.img", "/e"}}},
		{in: "--env A=b --fakeroot --scratch /tmp", want: ContainerArgs{Options: []string{"--env", "--fakeroot", "--scratch"}}},
		{in: "--some-new-option=x", want: ContainerArgs{Options: []string{"--some-new-option"}}},
		{in: "--bind /:/host", want: ContainerArgs{Options: []string{"--bind"}, Sources: []string{"/"}}},

		{in: "--bind /a; curl x|sh", wantErr: `contains ';'`},
		{in: "--bind $HOME:/h", wantErr: `contains '$'`},
		{in: "--bind `id`", wantErr: "contains '`'"},
		{in: "--bind '/a b'", wantErr: `contains '\''`},
		{in: "--bind ~/x", wantErr: `contains '~'`},
		{in: "--bind /a\n--nv", wantErr: `contains '\n'`},
		{in: "--bind /a>/tmp/x", wantErr: `contains '>'`},
		{in: "/a:/b", wantErr: "is not an option: the container runtime would read it as the image"},
		{in: "--fakeroot /data", wantErr: `"/data" is not an option`},
		{in: "--bind", wantErr: "--bind needs a value"},
		{in: "--bind data:/d", wantErr: `host path "data" is relative`},
		{in: "--bind /scratch/a/../../etc:/e", wantErr: "has a .. element"},
		{in: "--bind /a,,/b", wantErr: "a host path is empty"},
		{in: "--mount type=bind,dst=/d", wantErr: "names no source="},
		{in: "-ce", wantErr: "combines short options"},
		{in: "-X", wantErr: "is not a short option"},
		{in: "--", wantErr: "is not an option"},
	} {
		got, err := ParseSingularityArgs(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseSingularityArgs(%q) = %+v, %v; want an error containing %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseSingularityArgs(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func TestParseEnrootArgs(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    ContainerArgs
		wantErr string
	}{
		{in: "--mount /scratch/a:/data", want: ContainerArgs{Options: []string{"--mount"}, Sources: []string{"/scratch/a"}}},
		{in: "-m /a:/b:none:x-create=dir,bind --rw -r", want: ContainerArgs{Options: []string{"--mount", "--rw", "--root"}, Sources: []string{"/a"}}},
		{in: "--env A=1 -e B", want: ContainerArgs{Options: []string{"--env", "--env"}}},
		{in: "--conf /home/u/hook.sh", want: ContainerArgs{Options: []string{"--conf"}, Sources: []string{"/home/u/hook.sh"}}},
		{in: "--mount tmpfs:/tmp:tmpfs", wantErr: `host path "tmpfs" is relative`},
		{in: "--mount .:mnt", wantErr: "is relative"},
		{in: "-m", wantErr: "--mount needs a value"},
		{in: "--mount ${HOME}:/h", wantErr: `contains '$'`},
	} {
		got, err := ParseEnrootArgs(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseEnrootArgs(%q) = %+v, %v; want an error containing %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseEnrootArgs(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func TestPlainWord(t *testing.T) {
	for _, ok := range []string{"busybox", "docker.io/library/busybox:1.36", "ghcr.io/o/i@sha256:0123abcd", "docker://", "/cvmfs/unpacked.cern.ch/x", "10.0.0.7"} {
		if err := PlainWord(ok); err != nil {
			t.Errorf("PlainWord(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "busybox;id", "busybox $(id)", "a b", "x\ny", "1; rm -rf ~", "img`id`", "/data/*"} {
		if PlainWord(bad) == nil {
			t.Errorf("PlainWord(%q) = nil", bad)
		}
	}
}
