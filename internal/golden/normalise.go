package golden

import (
	"regexp"
	"strings"
)

// Rule replaces what changes from run to run (a time, a port, a temporary
// directory) with a placeholder that says what stood there. A golden test
// lists its rules next to the command it runs, so that a reader sees what
// the file does not hold; a rule never replaces what is the same on every
// run, since that is what a user reads.
type Rule func(string) string

// Literal replaces each occurrence of s with placeholder, except where s
// ends in a digit and a digit follows (an address 127.0.0.1:4000 is not
// taken out of 127.0.0.1:40001).
func Literal(s, placeholder string) Rule {
	endsInDigit := s != "" && isDigit(s[len(s)-1])
	return func(text string) string {
		var b strings.Builder
		for {
			i := strings.Index(text, s)
			if i < 0 || s == "" {
				return b.String() + text
			}
			end := i + len(s)
			if endsInDigit && end < len(text) && isDigit(text[end]) {
				b.WriteString(text[:end])
			} else {
				b.WriteString(text[:i] + placeholder)
			}
			text = text[end:]
		}
	}
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// Pattern replaces what expr matches with placeholder, which may name the
// expression's groups as regexp.Expand does ($1, ${name}).
func Pattern(expr, placeholder string) Rule {
	re := regexp.MustCompile(expr)
	return func(text string) string { return re.ReplaceAllString(text, placeholder) }
}

// Normalise applies rules to text in order.
func Normalise(text string, rules ...Rule) string {
	for _, r := range rules {
		text = r(text)
	}
	return text
}
