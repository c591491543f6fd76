package admission

import (
	"errors"

	"google.golang.org/protobuf/encoding/protowire"
)

// The OTLP messages whose decoded copies cost memory per element: every element of these (a resource,
// a scope, a metric, a data point, an attribute, an exemplar, a quantile, a nested value) is one item, and
// so is every element of a repeated number (a histogram's bounds and bucket counts, see scalars).
// Field numbers are those of opentelemetry-proto's metrics/v1, resource/v1 and common/v1.
type kind uint8

const (
	request kind = iota
	resourceMetrics
	resource
	scopeMetrics
	scope
	metricMsg
	numberData // Gauge and Sum: data_points = 1
	histogramData
	expHistogramData
	summaryData
	numberPoint
	histogramPoint
	expHistogramPoint
	summaryPoint
	buckets // an exponential histogram point's positive or negative buckets
	exemplar
	quantile
	keyValue
	anyValue
	arrayValue
	keyValueList
)

var children = [...]map[protowire.Number]kind{
	request:           {1: resourceMetrics},
	resourceMetrics:   {1: resource, 2: scopeMetrics},
	resource:          {1: keyValue},
	scopeMetrics:      {1: scope, 2: metricMsg},
	scope:             {3: keyValue},
	metricMsg:         {5: numberData, 7: numberData, 9: histogramData, 10: expHistogramData, 11: summaryData, 12: keyValue},
	numberData:        {1: numberPoint},
	histogramData:     {1: histogramPoint},
	expHistogramData:  {1: expHistogramPoint},
	summaryData:       {1: summaryPoint},
	numberPoint:       {7: keyValue, 5: exemplar},
	histogramPoint:    {9: keyValue, 8: exemplar},
	expHistogramPoint: {1: keyValue, 8: buckets, 9: buckets, 11: exemplar},
	summaryPoint:      {7: keyValue, 6: quantile},
	buckets:           {},
	exemplar:          {7: keyValue},
	quantile:          {},
	keyValue:          {2: anyValue},
	anyValue:          {5: arrayValue, 6: keyValueList},
	arrayValue:        {1: anyValue},
	keyValueList:      {1: keyValue},
}

// scalars are the repeated numbers of a message, with the wire type of one element: a histogram point's
// bucket_counts (6) and explicit_bounds (7), fixed64 and double; an exponential histogram's bucket_counts (2),
// varints. Packed (one length-delimited field) a bound takes 8 bytes on the wire and 8 decoded, a varint count
// 1 byte and 8 decoded; unpacked each element is a field of its own. Either way each element is one item: a
// body of huge bound lists is refused like a body of many points.
var scalars = map[kind]map[protowire.Number]protowire.Type{
	histogramPoint: {6: protowire.Fixed64Type, 7: protowire.Fixed64Type},
	buckets:        {2: protowire.VarintType},
}

// maxDepth is deeper than any OTLP request nests (request → ... → point → attribute → value is 9) with
// room for nested attribute values; a deeper body is refused rather than walked.
const maxDepth = 24

var (
	errMalformed = errors.New("not an OTLP ExportMetricsServiceRequest in protobuf")
	errTooMany   = errors.New("more items than max_items_per_request")
)

// countItems walks an ExportMetricsServiceRequest's wire bytes without decoding it and counts its items,
// stopping as soon as there are more than limit (errTooMany). It allocates nothing.
func countItems(body []byte, limit int) (int, error) {
	n := 0
	err := walk(body, request, 0, &n, limit)
	return n, err
}

func walk(b []byte, k kind, depth int, n *int, limit int) error {
	if depth > maxDepth {
		return errMalformed
	}
	for len(b) > 0 {
		num, typ, tagLen := protowire.ConsumeTag(b)
		if tagLen < 0 {
			return errMalformed
		}
		b = b[tagLen:]
		if child, ok := children[k][num]; ok && typ == protowire.BytesType {
			v, l := protowire.ConsumeBytes(b)
			if l < 0 {
				return errMalformed
			}
			if *n++; *n > limit {
				return errTooMany
			}
			if err := walk(v, child, depth+1, n, limit); err != nil {
				return err
			}
			b = b[l:]
			continue
		}
		l := protowire.ConsumeFieldValue(num, typ, b)
		if l < 0 {
			return errMalformed
		}
		if elem, ok := scalars[k][num]; ok {
			if *n += elements(b[:l], typ, elem); *n > limit {
				return errTooMany
			}
		}
		b = b[l:]
	}
	return nil
}

// elements is how many numbers of wire type elem one field of a repeated number holds: one unpacked, or as
// many as its packed bytes encode (a varint ends at each byte below 0x80).
func elements(field []byte, typ, elem protowire.Type) int {
	if typ != protowire.BytesType {
		return 1
	}
	v, _ := protowire.ConsumeBytes(field)
	if elem == protowire.Fixed64Type {
		return (len(v) + 7) / 8
	}
	n := 0
	for _, c := range v {
		if c < 0x80 {
			n++
		}
	}
	return n
}
