// Command docgen writes docs/reference/flags.md from the built binary's --help of each
// command (`make docs`); test/docs fails while the committed page differs.
//
//	go run ./cmd/docgen -binary ../bin/sar-bridge -o ../docs/reference/flags.md
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/sar-bridge/sar-bridge/test/docs"
)

func main() {
	binary := flag.String("binary", "", "the sar-bridge binary whose --help the page shows")
	out := flag.String("o", "", "the page to write (docs/reference/flags.md)")
	flag.Parse()
	if *binary == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "usage: docgen -binary BIN -o FILE")
		os.Exit(2)
	}
	page, err := docs.FlagsReference(*binary)
	if err != nil {
		fmt.Fprintf(os.Stderr, "docgen: %v\n", err)
		os.Exit(1)
	}
	if err := os.WriteFile(*out, []byte(page), 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "docgen: %v\n", err)
		os.Exit(1)
	}
}
