package stats

import (
	"encoding/json"
	"strconv"
)

// appendJSON appends c as the stats API's JSON object (documented on
// New), written by hand: a year of minutes is half a million numbers,
// and encoding/json would allocate for each point.
func (c *curve) appendJSON(b []byte) []byte {
	key, _ := json.Marshal(c.shortKey) // a string always marshals
	b = append(b, `{"short_key":`...)
	b = append(b, key...)
	b = append(b, `,"known":`...)
	switch k := c.known(); k {
	case "unknown":
		b = append(b, "null"...)
	default:
		b = append(b, k...)
	}
	if c.partial() {
		b = append(b, `,"partial":true,"partial_reason":"`+partialReason+`"`...)
	} else {
		b = append(b, `,"partial":false`...)
	}
	b = appendField(b, "total", c.total.Human)
	b = appendField(b, "bot_total", c.total.Bot)
	b = appendField(b, "range_total", c.rangeTotal.Human)
	b = appendField(b, "bot_range_total", c.rangeTotal.Bot)
	b = appendField(b, "from", c.from.Unix())
	b = appendField(b, "to", c.to.Unix())
	b = appendField(b, "step", int64(c.step.Seconds()))
	if !c.expiredBefore.IsZero() {
		b = appendField(b, "expired_before", c.expiredBefore.Unix())
	}
	b = append(b, `,"points":[`...)
	for i, p := range c.points {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '[')
		b = strconv.AppendInt(b, p.start, 10)
		if p.null {
			b = append(b, ",null,null"...)
		} else {
			b = append(b, ',')
			b = strconv.AppendInt(b, p.Human, 10)
			b = append(b, ',')
			b = strconv.AppendInt(b, p.Bot, 10)
		}
		if c.stitched {
			b = append(b, ',')
			b = strconv.AppendInt(b, p.step, 10)
		}
		b = append(b, ']')
	}
	return append(b, "]}\n"...)
}

func appendField(b []byte, name string, v int64) []byte {
	b = append(b, ",\""...)
	b = append(b, name...)
	b = append(b, "\":"...)
	return strconv.AppendInt(b, v, 10)
}

// appendCSV appends c's points as CSV with a header line, the counts of a
// null point left empty. Lines end in \n rather than RFC 4180's \r\n:
// analysts feed it to cut and awk too.
func (c *curve) appendCSV(b []byte) []byte {
	b = append(b, "unix_seconds,count,bot_count"...)
	if c.stitched {
		b = append(b, ",step"...)
	}
	b = append(b, '\n')
	for _, p := range c.points {
		b = strconv.AppendInt(b, p.start, 10)
		if p.null {
			b = append(b, ",,"...)
		} else {
			b = append(b, ',')
			b = strconv.AppendInt(b, p.Human, 10)
			b = append(b, ',')
			b = strconv.AppendInt(b, p.Bot, 10)
		}
		if c.stitched {
			b = append(b, ',')
			b = strconv.AppendInt(b, p.step, 10)
		}
		b = append(b, '\n')
	}
	return b
}
