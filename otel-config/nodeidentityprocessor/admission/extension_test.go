package admission

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/collector/client"
	"go.opentelemetry.io/collector/pdata/pmetric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"google.golang.org/protobuf/encoding/protowire"

	"nra.local/nodeidentityprocessor/internal/subjecttest"
)

const agentSA = subjecttest.AgentSA

type token = subjecttest.Token

var agentToken = subjecttest.Agent

// withToken stands in for the authenticator that runs before the middleware.
func withToken(t token, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(subjecttest.Context(r.Context(), t)))
	})
}

func testConfig() *Config {
	return &Config{ServiceAccount: agentSA, MaxConcurrentRequests: 2, MaxRequestsPerNode: 2,
		MaxWait: 100 * time.Millisecond, BodyTimeout: time.Second, MaxItemsPerRequest: 1000}
}

func newTestLimiter(t *testing.T, c *Config, next http.Handler) (*Limiter, func(token, []byte) *httptest.ResponseRecorder, *sdkmetric.ManualReader) {
	t.Helper()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	reader := sdkmetric.NewManualReader()
	l, err := newLimiter(c, sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("t"))
	if err != nil {
		t.Fatal(err)
	}
	wrap, _ := l.GetHTTPHandler(context.Background())
	h, _ := wrap(context.Background(), next)
	send := func(tok token, body []byte) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/v1/metrics", bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/x-protobuf")
		withToken(tok, h).ServeHTTP(rec, r)
		return rec
	}
	return l, send, reader
}

// refused is otelcol_admission_refused_requests by "reason/node".
func refused(t *testing.T, reader *sdkmetric.ManualReader) map[string]int64 {
	return subjecttest.Counts(t, reader, "otelcol_admission_refused_requests")
}

// push is an OTLP request of n gauge points, as protobuf.
func push(n int) []byte {
	md := pmetric.NewMetrics()
	m := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	m.SetName("g")
	dps := m.SetEmptyGauge().DataPoints()
	for i := 0; i < n; i++ {
		dps.AppendEmpty().Attributes().PutStr("k8s.pod.uid", fmt.Sprint(i))
	}
	b, err := (&pmetric.ProtoMarshaler{}).MarshalMetrics(md)
	if err != nil {
		panic(err)
	}
	return b
}

func TestRequestsBeyondTheSlotsWaitThenAreRefusedWith429(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	running, peak := 0, 0
	c := testConfig()
	c.MaxRequestsPerNode = 1
	_, send, reader := newTestLimiter(t, c, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		mu.Lock()
		running++
		peak = max(peak, running)
		mu.Unlock()
		<-release
		mu.Lock()
		running--
		mu.Unlock()
	}))
	codes := make(chan int, 5)
	for i := 0; i < 5; i++ {
		go func() { codes <- send(agentToken(fmt.Sprint("node-", i)), push(1)).Code }()
	}
	// The three without a slot wait max_wait and are refused while the two hold theirs.
	got := map[int]int{}
	for i := 0; i < 3; i++ {
		got[<-codes]++
	}
	close(release)
	for i := 0; i < 2; i++ {
		got[<-codes]++
	}
	if got[http.StatusTooManyRequests] != 3 || got[http.StatusOK] != 2 || peak != 2 {
		t.Fatalf("codes %v, peak %d", got, peak)
	}
	// Slots are given back: the next request runs at once.
	if code := send(agentToken("node-9"), push(1)).Code; code != http.StatusOK {
		t.Fatalf("after release: %d", code)
	}
	total := int64(0)
	for k, v := range refused(t, reader) {
		if !strings.HasPrefix(k, ReasonBusy+"/node-") {
			t.Fatalf("refusal counted as %s", k)
		}
		total += v
	}
	if total != 3 {
		t.Fatalf("%d refusals counted, want 3", total)
	}
}

func TestATokenOfAnotherSubjectIsRefusedBeforeASlotOrItsBody(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	_, send, reader := newTestLimiter(t, testConfig(), http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release }))
	for i := 0; i < 2; i++ { // every slot taken
		go send(agentToken(fmt.Sprint("busy-", i)), push(1))
	}
	time.Sleep(50 * time.Millisecond)
	for _, tok := range []token{
		{"subject": "system:serviceaccount:tenant:default", "claims.kubernetes.io": map[string]any{"node": map[string]any{"name": "node-a"}}},
		{"subject": agentSA}, // names no node
	} {
		start := time.Now()
		if rec := send(tok, push(1)); rec.Code != http.StatusForbidden {
			t.Fatalf("%v: %d %s", tok, rec.Code, rec.Body)
		}
		if d := time.Since(start); d > 50*time.Millisecond {
			t.Fatalf("refused after %s: it waited for a slot", d)
		}
	}
	if got := refused(t, reader); got[ReasonSubject+"/"] != 2 || len(got) != 1 {
		t.Fatalf("refusals counted %v", got)
	}
}

func TestOneNodeHoldsAtMostItsShareAndOthersStillGetSlots(t *testing.T) {
	release := make(chan struct{})
	c := testConfig()
	c.MaxConcurrentRequests, c.MaxRequestsPerNode = 4, 2
	var served atomic.Int32
	_, send, reader := newTestLimiter(t, c, http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		if client.FromContext(r.Context()).Auth.(token)["claims.kubernetes.io"].(map[string]any)["node"].(map[string]any)["name"] == "node-a" {
			<-release
		}
		served.Add(1)
	}))
	done := make(chan int, 8)
	for i := 0; i < 8; i++ { // eight pushes of node-a at once: two are admitted, six refused at once
		go func() { done <- send(agentToken("node-a"), push(1)).Code }()
	}
	for i := 0; i < 6; i++ {
		if code := <-done; code != http.StatusTooManyRequests {
			t.Fatalf("node-a's push beyond its share: %d", code)
		}
	}
	for i := 0; i < 5; i++ {
		if code := send(agentToken("node-b"), push(1)).Code; code != http.StatusOK {
			t.Fatalf("node-b's push while node-a holds its share: %d", code)
		}
	}
	close(release)
	<-done
	<-done
	if got := refused(t, reader); got[ReasonNodeShare+"/node-a"] != 6 || len(got) != 1 {
		t.Fatalf("refusals counted %v", got)
	}
}

func TestBodiesAreBoundedByTheirItemsBeforeDecoding(t *testing.T) {
	var got []byte
	_, send, reader := newTestLimiter(t, testConfig(), http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		got, _ = io.ReadAll(r.Body)
	}))
	// resource_metrics, resource, scope_metrics, scope, metric, gauge: 6; each point with its attribute and value: 3.
	ok := push((1000 - 6) / 3)
	if rec := send(agentToken("node-a"), ok); rec.Code != http.StatusOK || !bytes.Equal(got, ok) {
		t.Fatalf("a push within the items: %d, body passed on unchanged %v", rec.Code, bytes.Equal(got, ok))
	}
	if rec := send(agentToken("node-a"), push((1000-6)/3+1)); rec.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("a push over the items: %d", rec.Code)
	}
	if rec := send(agentToken("node-a"), []byte("\xff\xff\xff garbage")); rec.Code != http.StatusBadRequest {
		t.Fatalf("garbage: %d", rec.Code)
	}
	r := httptest.NewRequest(http.MethodPost, "/v1/metrics", strings.NewReader(`{"resourceMetrics":[]}`))
	r.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	l, _ := newLimiter(testConfig(), sdkmetric.NewMeterProvider().Meter("t"))
	wrap, _ := l.GetHTTPHandler(context.Background())
	h, _ := wrap(context.Background(), http.NotFoundHandler())
	withToken(agentToken("node-a"), h).ServeHTTP(rec, r)
	if rec.Code != http.StatusUnsupportedMediaType {
		t.Fatalf("json: %d", rec.Code)
	}
	if got := refused(t, reader); got[ReasonItems+"/node-a"] != 1 || got[ReasonMalformed+"/node-a"] != 1 {
		t.Fatalf("refusals counted %v", got)
	}
}

func TestCountItemsMatchesTheDecodedRequest(t *testing.T) {
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr("a", "b")                                   // 1 resource + 1 attribute
	sm := rm.ScopeMetrics().AppendEmpty()                                         // 1 scope metrics
	sm.Scope().SetName("s")                                                       // 1 scope
	h := sm.Metrics().AppendEmpty()                                               // 1 metric
	h.SetName("h")                                                                //
	hp := h.SetEmptyHistogram().DataPoints().AppendEmpty()                        // 1 histogram data + 1 point
	hp.Attributes().PutEmptySlice("list").AppendEmpty().SetStr("x")               // attribute, value, array, element
	hp.Exemplars().AppendEmpty().FilteredAttributes().PutStr("trace", "t")        // exemplar + attribute + value
	s := sm.Metrics().AppendEmpty()                                               // 1 metric
	s.SetEmptySummary().DataPoints().AppendEmpty().QuantileValues().AppendEmpty() // summary data, point, quantile
	body, _ := (&pmetric.ProtoMarshaler{}).MarshalMetrics(md)
	// resource_metrics, resource, kv, value | scope_metrics, scope | metric, histogram, point, kv, value, array,
	// element, exemplar, kv, value | metric, summary, point, quantile
	if n, err := countItems(body, 1000); err != nil || n != 4+2+10+4 {
		t.Fatalf("counted %d (%v)", n, err)
	}
	if _, err := countItems(body, 10); err != errTooMany {
		t.Fatalf("limit 10: %v", err)
	}
}

// nested wraps payload in length-delimited fields, innermost number last.
func nested(payload []byte, numbers ...protowire.Number) []byte {
	for i := len(numbers) - 1; i >= 0; i-- {
		payload = protowire.AppendBytes(protowire.AppendTag(nil, numbers[i], protowire.BytesType), payload)
	}
	return payload
}

func TestEveryBoundAndBucketCountIsAnItemPackedOrNot(t *testing.T) {
	md := pmetric.NewMetrics()
	ms := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics()
	hp := ms.AppendEmpty().SetEmptyHistogram().DataPoints().AppendEmpty()
	hp.ExplicitBounds().FromRaw(make([]float64, 500))
	hp.BucketCounts().FromRaw(make([]uint64, 501))
	ep := ms.AppendEmpty().SetEmptyExponentialHistogram().DataPoints().AppendEmpty()
	ep.Positive().BucketCounts().FromRaw([]uint64{1, 300, 70000}) // varints of 1, 2 and 3 bytes
	ep.Negative().BucketCounts().FromRaw(make([]uint64, 10))
	body, _ := (&pmetric.ProtoMarshaler{}).MarshalMetrics(md)
	// resource_metrics, resource, scope_metrics, scope | metric, histogram, point, 500 bounds, 501 counts | metric, exponential
	// histogram, point, positive, 3 counts, negative, 10 counts. Before: 500 bounds were no item at all.
	if n, err := countItems(body, 10_000); err != nil || n != 4+3+1001+3+1+3+1+10 {
		t.Fatalf("counted %d (%v)", n, err)
	}
	if _, err := countItems(body, 1000); err != errTooMany {
		t.Fatalf("a point of 1,001 numbers within 1,000 items: %v", err)
	}
	// The same bounds unpacked: a field per bound.
	var point []byte
	for i := 0; i < 600; i++ {
		point = protowire.AppendFixed64(protowire.AppendTag(point, 7, protowire.Fixed64Type), uint64(i))
	}
	unpacked := nested(point, 1, 2, 2, 9, 1) // request.resource_metrics.scope_metrics.metrics.histogram.data_points
	if n, err := countItems(unpacked, 10_000); err != nil || n != 5+600 {
		t.Fatalf("unpacked: counted %d (%v)", n, err)
	}
	decoded, err := (&pmetric.ProtoUnmarshaler{}).UnmarshalMetrics(unpacked)
	if err != nil || decoded.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics().At(0).Histogram().DataPoints().At(0).
		ExplicitBounds().Len() != 600 {
		t.Fatalf("the unpacked body is not the request it stands for: %v", err)
	}
}

func TestASenderTricklingItsBodyLosesItsSlotAtBodyTimeout(t *testing.T) {
	c := testConfig()
	c.MaxConcurrentRequests, c.BodyTimeout = 1, 300*time.Millisecond
	c.MaxWait = 2 * time.Second
	c.MaxRequestsPerNode = 1
	reader := sdkmetric.NewManualReader()
	l, _ := newLimiter(c, sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("t"))
	wrap, _ := l.GetHTTPHandler(context.Background())
	h, _ := wrap(context.Background(), http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	// The node is the one the request names in a header here (the authenticator's token in the Collector).
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		withToken(agentToken(r.Header.Get("X-Node")), h).ServeHTTP(w, r)
	}))
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/metrics HTTP/1.1\r\nHost: x\r\nX-Node: node-a\r\nContent-Type: application/x-protobuf\r\nContent-Length: 1000\r\n\r\n")
	stop := make(chan struct{})
	go func() { // a byte every 50 ms: the body would take 50 s
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				if _, err := conn.Write([]byte{0}); err != nil {
					return
				}
			}
		}
	}()
	defer close(stop)
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	r, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/metrics", bytes.NewReader(push(1)))
	r.Header.Set("Content-Type", "application/x-protobuf")
	r.Header.Set("X-Node", "node-b")
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// The honest push waited for the trickler's slot, which body_timeout freed, not the 50 s the trickle takes.
	if resp.StatusCode != http.StatusOK || time.Since(start) > time.Second {
		t.Fatalf("push next to a trickler: %d after %s", resp.StatusCode, time.Since(start))
	}
	if got := refused(t, reader); got[ReasonBodyTimeout+"/node-a"] != 1 {
		t.Fatalf("refusals counted %v", got)
	}
}
