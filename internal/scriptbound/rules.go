package scriptbound

import (
	"fmt"
	"net/netip"
	"strings"
	"unicode/utf8"
)

// Rule is a grammar a value written unquoted must belong to, to be read by the shell
// as itself.
type Rule int

const (
	// Word: letters, digits and _ . , : / = @ + - (printable ASCII the shell reads as
	// itself, no glob, quote, expansion, separator, redirection or white space).
	Word Rule = iota
	// Path: a Word without , or : (they separate singularity's --bind specs and
	// their fields).
	Path
	// RelativePath: slash-separated plain segments (letters, digits and _ . -), not
	// absolute, no empty, "." or ".." segment.
	RelativePath
	// Image: a Word that does not start with - (it would be read as an option).
	Image
	// IPAddress: an IP address exactly as Go's netip prints it, without a zone.
	IPAddress
	// DoubleQuotedText: no $ ` " \ and no control character, so double quotes keep
	// it literal.
	DoubleQuotedText
	// Identifier: letters, digits, _ and -: a name the plugins make paths
	// and shell variable names of (a namespace, a uid, a container's name), where a .
	// or / would change what they name.
	Identifier
	// FileName: an Identifier that may also hold dots, but is not . or ..: the pod's
	// name in the HTCondor plugin's file names.
	FileName
)

var ruleNames = map[Rule]string{
	Word:             "a plain word (letters, digits and _ . , : / = @ + -)",
	Path:             "a plain path (letters, digits and _ . / = @ + -)",
	RelativePath:     "a relative path of plain segments (letters, digits and _ . -, no . or .. segment)",
	Image:            "a plain word (letters, digits and _ . , : / = @ + -) not starting with -",
	IPAddress:        "an IP address as Go prints it, without a zone",
	DoubleQuotedText: "text without $ ` \" \\ or control characters",
	Identifier:       "a name of letters, digits, _ and -",
	FileName:         "a name of letters, digits, _ . and -, not . or ..",
}

func (r Rule) String() string { return ruleNames[r] }

func wordChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("_.,:/=@+-", c) >= 0
}

// firstNotIn is the first rune of v the predicate refuses, and its byte offset.
func firstNotIn(v string, ok func(c byte) bool) (rune, int, bool) {
	for i := 0; i < len(v); i++ {
		if !ok(v[i]) {
			r, _ := utf8.DecodeRuneInString(v[i:])
			return r, i, true
		}
	}
	return 0, 0, false
}

func badChar(r rune, i int) error {
	return fmt.Errorf("contains %s (byte %d)", describe(r), i)
}

// describe names a character so that a message shows even white space and control
// characters.
func describe(r rune) string {
	switch r {
	case ' ':
		return "a space"
	case '\n':
		return "a line break"
	case '\t':
		return "a tab"
	case utf8.RuneError:
		return "a byte that is not UTF-8"
	}
	if r < 0x20 || r == 0x7f || r > 0x7e {
		return fmt.Sprintf("%U", r)
	}
	return fmt.Sprintf("%q", r)
}

// Check says why v does not belong to the rule's grammar; nil when it does.
func (r Rule) Check(v string) error {
	switch r {
	case Word:
		if c, i, bad := firstNotIn(v, wordChar); bad {
			return badChar(c, i)
		}
	case Path:
		if c, i, bad := firstNotIn(v, func(c byte) bool { return wordChar(c) && c != ',' && c != ':' }); bad {
			return badChar(c, i)
		}
	case Image:
		if v == "" {
			// The word after it (the command) would stand in the image's place.
			return fmt.Errorf("is empty")
		}
		if c, i, bad := firstNotIn(v, wordChar); bad {
			return badChar(c, i)
		}
		if strings.HasPrefix(v, "-") {
			return fmt.Errorf("starts with \"-\"")
		}
	case Identifier, FileName:
		// Empty is inert (a pod's name before generateName, a uid before the API
		// server sets one).
		if r == FileName && (v == "." || v == "..") {
			return fmt.Errorf("is %q", v)
		}
		if c, i, bad := firstNotIn(v, func(c byte) bool {
			return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || r == FileName && c == '.'
		}); bad {
			return badChar(c, i)
		}
	case RelativePath:
		return checkRelativePath(v)
	case IPAddress:
		a, err := netip.ParseAddr(v)
		if err != nil {
			return fmt.Errorf("is not an IP address")
		}
		if a.Zone() != "" {
			return fmt.Errorf("has a zone (%%…): its text would reach the job script")
		}
		if a.String() != v {
			return fmt.Errorf("is not written as Go prints the address (%s)", a)
		}
	case DoubleQuotedText:
		if c, i, bad := firstNotIn(v, func(c byte) bool { return c >= 0x20 && c < 0x7f && strings.IndexByte("$`\"\\", c) < 0 }); bad {
			return badChar(c, i)
		}
	}
	return nil
}

func checkRelativePath(v string) error {
	if v == "" {
		return fmt.Errorf("is empty")
	}
	if strings.HasPrefix(v, "/") {
		return fmt.Errorf("is absolute")
	}
	for _, seg := range strings.Split(v, "/") {
		switch seg {
		case "":
			return fmt.Errorf("has an empty segment")
		case ".", "..":
			return fmt.Errorf("has a %q segment", seg)
		}
	}
	if c, i, bad := firstNotIn(v, func(c byte) bool {
		return c == '/' || wordChar(c) && c != ',' && c != ':' && c != '=' && c != '@' && c != '+'
	}); bad {
		return badChar(c, i)
	}
	return nil
}
