package admission

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric/noop"
)

func TestRequestsBeyondTheSlotsWaitThenAreRefusedWith429(t *testing.T) {
	l, err := newLimiter(&Config{MaxConcurrentRequests: 2, MaxWait: 100 * time.Millisecond}, noop.NewMeterProvider().Meter("t"))
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var mu sync.Mutex
	running, peak := 0, 0
	wrap, _ := l.GetHTTPHandler(context.Background())
	h, _ := wrap(context.Background(), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
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
		go func() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/metrics", nil))
			codes <- rec.Code
		}()
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
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("after release: %d", rec.Code)
	}
}

func TestAWaitingRequestGetsAFreedSlot(t *testing.T) {
	l, _ := newLimiter(&Config{MaxConcurrentRequests: 1, MaxWait: 2 * time.Second}, noop.NewMeterProvider().Meter("t"))
	wrap, _ := l.GetHTTPHandler(context.Background())
	h, _ := wrap(context.Background(), http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		time.Sleep(50 * time.Millisecond)
	}))
	done := make(chan int, 2)
	for i := 0; i < 2; i++ {
		go func() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/metrics", nil))
			done <- rec.Code
		}()
	}
	if a, b := <-done, <-done; a != http.StatusOK || b != http.StatusOK {
		t.Fatalf("codes %d %d", a, b)
	}
}
