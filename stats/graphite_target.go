package stats

import (
	"fmt"
	"strconv"
	"strings"
)

// A Graphite target (graphite-web's render API, "target" parameter): a path
// expression with wildcards, or a function call whose arguments are
// targets, numbers, quoted strings, booleans or name=value keywords:
//
//	highestMax(linkgate.links.*.visits, 5)
//	sumSeries(linkgate.links.{go,gh}.humans)
//	summarize(linkgate.all.visits, "1d", "sum")

// gNode is a parsed target or argument.
type gNode struct {
	kind   gKind
	path   string   // gPath
	fn     string   // gCall
	args   []*gNode // gCall: positional
	kwargs map[string]*gNode
	num    float64 // gNumber
	str    string  // gString; gNumber and gBool keep their text too
	b      bool    // gBool
}

type gKind int

const (
	gPath gKind = iota
	gCall
	gNumber
	gString
	gBool
)

// maxTargetBytes bounds a target's length, and maxDepth its nesting.
const (
	maxTargetBytes = 4096
	maxDepth       = 32
)

// parseTarget parses one target.
func parseTarget(s string) (*gNode, error) {
	if len(s) > maxTargetBytes {
		return nil, fmt.Errorf("longer than %d bytes", maxTargetBytes)
	}
	p := &gParser{s: s}
	n, err := p.expr(0)
	if err != nil {
		return nil, err
	}
	p.space()
	if p.i != len(p.s) {
		return nil, fmt.Errorf("unexpected %q at %d", p.s[p.i:], p.i)
	}
	return n, nil
}

type gParser struct {
	s string
	i int
}

func (p *gParser) space() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t' || p.s[p.i] == '\n') {
		p.i++
	}
}

// expr parses one expression of the target grammar at p.i: a number, a
// quoted string, a function call with its arguments, or a metric path with
// its wildcards. It is one function, longer than most, because it is one
// recursive-descent rule whose alternatives are told apart by their first
// bytes: split, each part would re-read where the last one stopped.
func (p *gParser) expr(depth int) (*gNode, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("nested deeper than %d", maxDepth)
	}
	p.space()
	if p.i >= len(p.s) {
		return nil, fmt.Errorf("a target or value is missing at %d", p.i)
	}
	switch c := p.s[p.i]; {
	case c == '"' || c == '\'':
		end := strings.IndexByte(p.s[p.i+1:], c)
		if end < 0 {
			return nil, fmt.Errorf("unterminated string at %d", p.i)
		}
		v := p.s[p.i+1 : p.i+1+end]
		p.i += end + 2
		return &gNode{kind: gString, str: v}, nil
	case c == '(' || c == ')' || c == ',' || c == '=':
		return nil, fmt.Errorf("unexpected %q at %d", c, p.i)
	}
	start := p.i
	depthBrace := 0
	for p.i < len(p.s) {
		c := p.s[p.i]
		if c == '{' {
			depthBrace++
		} else if c == '}' {
			depthBrace--
		} else if depthBrace == 0 && (c == '(' || c == ')' || c == ',' || c == '=' || c == ' ' || c == '\t' || c == '\n' || c == '"' || c == '\'') {
			break
		}
		p.i++
	}
	tok := p.s[start:p.i]
	if depthBrace != 0 {
		return nil, fmt.Errorf("unbalanced braces in %q", tok)
	}
	p.space()
	if p.i < len(p.s) && p.s[p.i] == '(' {
		if !isIdent(tok) {
			return nil, fmt.Errorf("%q is not a function name", tok)
		}
		p.i++
		call := &gNode{kind: gCall, fn: tok}
		p.space()
		if p.i < len(p.s) && p.s[p.i] == ')' {
			p.i++
			return call, nil
		}
		for {
			p.space()
			// A keyword argument: name=value.
			save := p.i
			j := p.i
			for j < len(p.s) && (isIdentByte(p.s[j])) {
				j++
			}
			if j > p.i && j < len(p.s) && p.s[j] == '=' {
				name := p.s[p.i:j]
				p.i = j + 1
				v, err := p.expr(depth + 1)
				if err != nil {
					return nil, err
				}
				if call.kwargs == nil {
					call.kwargs = map[string]*gNode{}
				}
				call.kwargs[name] = v
			} else {
				p.i = save
				a, err := p.expr(depth + 1)
				if err != nil {
					return nil, err
				}
				if len(call.kwargs) > 0 {
					return nil, fmt.Errorf("a positional argument after keyword arguments in %s()", tok)
				}
				call.args = append(call.args, a)
			}
			p.space()
			if p.i >= len(p.s) {
				return nil, fmt.Errorf("%s( is not closed", tok)
			}
			if p.s[p.i] == ',' {
				p.i++
				continue
			}
			if p.s[p.i] == ')' {
				p.i++
				return call, nil
			}
			return nil, fmt.Errorf("unexpected %q at %d in %s()", p.s[p.i], p.i, tok)
		}
	}
	if tok == "" {
		return nil, fmt.Errorf("a target or value is missing at %d", p.i)
	}
	switch tok {
	case "true", "True":
		return &gNode{kind: gBool, b: true, str: tok}, nil
	case "false", "False":
		return &gNode{kind: gBool, str: tok}, nil
	}
	if f, err := strconv.ParseFloat(tok, 64); err == nil && (tok[0] == '-' || tok[0] == '.' || tok[0] >= '0' && tok[0] <= '9') {
		return &gNode{kind: gNumber, num: f, str: tok}, nil
	}
	return &gNode{kind: gPath, path: tok}, nil
}

func isIdentByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_'
}

func isIdent(s string) bool {
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for i := range len(s) {
		if !isIdentByte(s[i]) {
			return false
		}
	}
	return true
}

// String writes n back as a target, the way graphite-web names the series
// of a function: sumSeries(linkgate.links.*.visits).
func (n *gNode) String() string {
	switch n.kind {
	case gPath:
		return n.path
	case gNumber, gBool:
		return n.str
	case gString:
		return `"` + n.str + `"`
	}
	var b strings.Builder
	b.WriteString(n.fn)
	b.WriteByte('(')
	for i, a := range n.args {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(a.String())
	}
	b.WriteByte(')')
	return b.String()
}
