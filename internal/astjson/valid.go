package astjson

// Valid reports whether data is one valid JSON value, exactly as encoding/json's Valid
// does (FuzzValid compares them): the same grammar, strings that may hold any byte but
// the control characters (invalid UTF-8 included, as encoding/json accepts it), and the
// same nesting limit. It is the check every decision's body and input go through
// before they are decoded, once each, so it is a plain loop over the bytes rather than
// encoding/json's scanner, which calls a state function per byte.
func Valid(data []byte) bool {
	v := validator{data: data}
	v.space()
	if !v.value(0) {
		return false
	}
	v.space()
	return v.pos == len(v.data)
}

// maxDepth is encoding/json's nesting limit: deeper documents are invalid.
const maxDepth = 10000

type validator struct {
	data []byte
	pos  int
}

func (v *validator) space() {
	for v.pos < len(v.data) {
		switch v.data[v.pos] {
		case ' ', '\t', '\n', '\r':
			v.pos++
		default:
			return
		}
	}
}

// value checks the value at v.pos (whitespace before it skipped); depth is the number
// of objects and arrays it is inside.
func (v *validator) value(depth int) bool {
	if v.pos >= len(v.data) {
		return false
	}
	switch c := v.data[v.pos]; {
	case c == '{':
		return v.object(depth + 1)
	case c == '[':
		return v.array(depth + 1)
	case c == '"':
		return v.string()
	case c == 't':
		return v.literal("true")
	case c == 'f':
		return v.literal("false")
	case c == 'n':
		return v.literal("null")
	case c == '-' || c >= '0' && c <= '9':
		return v.number()
	}
	return false
}

func (v *validator) literal(lit string) bool {
	if len(v.data)-v.pos < len(lit) || string(v.data[v.pos:v.pos+len(lit)]) != lit {
		return false
	}
	v.pos += len(lit)
	return true
}

func (v *validator) object(depth int) bool {
	if depth > maxDepth {
		return false
	}
	v.pos++ // '{'
	v.space()
	if v.pos < len(v.data) && v.data[v.pos] == '}' {
		v.pos++
		return true
	}
	for {
		if v.pos >= len(v.data) || v.data[v.pos] != '"' || !v.string() {
			return false
		}
		v.space()
		if v.pos >= len(v.data) || v.data[v.pos] != ':' {
			return false
		}
		v.pos++
		v.space()
		if !v.value(depth) {
			return false
		}
		v.space()
		if v.pos >= len(v.data) {
			return false
		}
		switch v.data[v.pos] {
		case ',':
			v.pos++
			v.space()
		case '}':
			v.pos++
			return true
		default:
			return false
		}
	}
}

func (v *validator) array(depth int) bool {
	if depth > maxDepth {
		return false
	}
	v.pos++ // '['
	v.space()
	if v.pos < len(v.data) && v.data[v.pos] == ']' {
		v.pos++
		return true
	}
	for {
		if !v.value(depth) {
			return false
		}
		v.space()
		if v.pos >= len(v.data) {
			return false
		}
		switch v.data[v.pos] {
		case ',':
			v.pos++
			v.space()
		case ']':
			v.pos++
			return true
		default:
			return false
		}
	}
}

// string checks the string literal at v.pos ('"').
func (v *validator) string() bool {
	v.pos++ // '"'
	for v.pos < len(v.data) {
		c := v.data[v.pos]
		switch {
		case c == '"':
			v.pos++
			return true
		case c < 0x20:
			return false
		case c == '\\':
			v.pos++
			if v.pos >= len(v.data) {
				return false
			}
			switch v.data[v.pos] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				v.pos++
			case 'u':
				v.pos++
				for range 4 {
					if v.pos >= len(v.data) || !isHex(v.data[v.pos]) {
						return false
					}
					v.pos++
				}
			default:
				return false
			}
		default:
			v.pos++
		}
	}
	return false
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// number checks -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? at v.pos.
func (v *validator) number() bool {
	if v.data[v.pos] == '-' {
		v.pos++
	}
	switch {
	case v.pos >= len(v.data):
		return false
	case v.data[v.pos] == '0':
		v.pos++
	case v.data[v.pos] >= '1' && v.data[v.pos] <= '9':
		v.digits()
	default:
		return false
	}
	if v.pos < len(v.data) && v.data[v.pos] == '.' {
		v.pos++
		if !v.digits() {
			return false
		}
	}
	if v.pos < len(v.data) && (v.data[v.pos] == 'e' || v.data[v.pos] == 'E') {
		v.pos++
		if v.pos < len(v.data) && (v.data[v.pos] == '+' || v.data[v.pos] == '-') {
			v.pos++
		}
		if !v.digits() {
			return false
		}
	}
	return true
}

// digits moves past one or more digits; false when there is none.
func (v *validator) digits() bool {
	start := v.pos
	for v.pos < len(v.data) && v.data[v.pos] >= '0' && v.data[v.pos] <= '9' {
		v.pos++
	}
	return v.pos > start
}
