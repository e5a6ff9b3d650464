package failpoint

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in   string
		want Term
		err  bool
	}{
		{in: "off", want: Term{Kind: Off}},
		{in: "crash", want: Term{Kind: Crash}},
		{in: " crash ", want: Term{Kind: Crash}},
		{in: "sleep(50ms)", want: Term{Kind: Sleep, Sleep: 50 * time.Millisecond}},
		{in: "error(disk full)", want: Term{Kind: Error, Message: "disk full"}},
		{in: "error()", want: Term{Kind: Error, Message: "injected"}},
		{in: "error", want: Term{Kind: Error, Message: "injected"}},
		{in: "3*crash", want: Term{Kind: Crash, Count: 3}},
		{in: "25%sleep(1s)", want: Term{Kind: Sleep, Sleep: time.Second, Percent: 25}},
		{in: "50%2*error(x*y%z)", want: Term{Kind: Error, Message: "x*y%z", Count: 2, Percent: 50}},
		{in: "sleep", err: true},
		{in: "sleep(-1s)", err: true},
		{in: "sleep(fast)", err: true},
		{in: "crash(now)", err: true},
		{in: "0*crash", err: true},
		{in: "-1*crash", err: true},
		{in: "0%crash", err: true},
		{in: "101%crash", err: true},
		{in: "error(unclosed", err: true},
		{in: "explode", err: true},
		{in: "", err: true},
	}
	for _, tc := range tests {
		got, err := Parse(tc.in)
		if (err != nil) != tc.err {
			t.Errorf("Parse(%q) error = %v, want error %v", tc.in, err, tc.err)
			continue
		}
		if err == nil && got != tc.want {
			t.Errorf("Parse(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
		if err == nil {
			// String renders what Parse reads back.
			again, err := Parse(got.String())
			if err != nil || again != got {
				t.Errorf("Parse(%q.String() = %q) = %+v, %v; want %+v", tc.in, got.String(), again, err, got)
			}
		}
	}
}

func TestParseList(t *testing.T) {
	tests := []struct {
		in   string
		want map[string]Term
		err  bool
	}{
		{in: "", want: map[string]Term{}},
		{in: "before-commit=crash", want: map[string]Term{BeforeCommit: {Kind: Crash}}},
		{in: "before-commit=sleep(1ms); after-ack=1*crash;", want: map[string]Term{
			BeforeCommit: {Kind: Sleep, Sleep: time.Millisecond}, AfterAck: {Kind: Crash, Count: 1}}},
		{in: "before-commit=crash;before-commit=off", want: map[string]Term{BeforeCommit: {Kind: Off}}},
		{in: "nowhere=crash", err: true},
		{in: "before-commit", err: true},
		{in: "before-commit=boom", err: true},
	}
	for _, tc := range tests {
		got, err := ParseList(tc.in)
		if (err != nil) != tc.err {
			t.Errorf("ParseList(%q) error = %v, want error %v", tc.in, err, tc.err)
			continue
		}
		if err != nil {
			continue
		}
		if len(got) != len(tc.want) {
			t.Errorf("ParseList(%q) = %v, want %v", tc.in, got, tc.want)
		}
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("ParseList(%q)[%s] = %+v, want %+v", tc.in, k, got[k], v)
			}
		}
	}
}

// testRegistry records crashes and sleeps instead of performing them.
func testRegistry() (*Registry, *int, *[]time.Duration) {
	r := NewRegistry()
	crashes, sleeps := new(int), new([]time.Duration)
	r.crash = func() { *crashes++ }
	r.sleep = func(d time.Duration) { *sleeps = append(*sleeps, d) }
	return r, crashes, sleeps
}

func TestRegistryHit(t *testing.T) {
	tests := []struct {
		name       string
		arm        string // EnvVar format
		hits       int
		wantErrs   int
		wantCrash  int
		wantSleeps int
		wantArmed  bool // still armed after the hits
	}{
		{name: "unarmed", arm: "", hits: 3},
		{name: "crash every time", arm: "after-commit=crash", hits: 3, wantCrash: 3, wantArmed: true},
		{name: "crash once", arm: "after-commit=1*crash", hits: 3, wantCrash: 1},
		{name: "sleep twice", arm: "after-commit=2*sleep(5ms)", hits: 3, wantSleeps: 2},
		{name: "error", arm: "after-commit=error(full)", hits: 2, wantErrs: 2, wantArmed: true},
		{name: "another point armed", arm: "before-ack=crash", hits: 2, wantArmed: false},
		{name: "off", arm: "after-commit=crash;after-commit=off", hits: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, crashes, sleeps := testRegistry()
			if err := r.ArmList(tc.arm); err != nil {
				t.Fatal(err)
			}
			errs := 0
			for i := 0; i < tc.hits; i++ {
				if err := r.Hit(AfterCommit); err != nil {
					if !errors.Is(err, ErrInjected) || !strings.Contains(err.Error(), AfterCommit) {
						t.Errorf("error %v does not wrap ErrInjected or name the failpoint", err)
					}
					errs++
				}
			}
			if errs != tc.wantErrs || *crashes != tc.wantCrash || len(*sleeps) != tc.wantSleeps {
				t.Errorf("errors %d, crashes %d, sleeps %d; want %d, %d, %d", errs, *crashes, len(*sleeps), tc.wantErrs, tc.wantCrash, tc.wantSleeps)
			}
			if _, armed := r.Armed()[AfterCommit]; armed != tc.wantArmed {
				t.Errorf("armed after the hits: %v, want %v", armed, tc.wantArmed)
			}
			if got, want := r.Fired(AfterCommit), tc.wantErrs+tc.wantCrash+tc.wantSleeps; got != want {
				t.Errorf("Fired = %d, want %d", got, want)
			}
		})
	}
}

func TestRegistryProbability(t *testing.T) {
	r, crashes, _ := testRegistry()
	if err := r.ArmList("before-ack=10%crash"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2000; i++ {
		r.Hit(BeforeAck)
	}
	// Binomial(2000, 0.1): mean 200, sd 13.4; 120..280 is ±6 sd.
	if *crashes < 120 || *crashes > 280 {
		t.Errorf("10%% fired %d times in 2000 hits", *crashes)
	}
}

func TestArmUnknown(t *testing.T) {
	r := NewRegistry()
	if err := r.Arm("nowhere", Term{Kind: Crash}); err == nil {
		t.Error("arming an unknown failpoint succeeded")
	}
}

func TestHandler(t *testing.T) {
	r, crashes, _ := testRegistry()
	srv := httptest.NewServer(http.StripPrefix("/debug/failpoints", r.Handler()))
	defer srv.Close()
	do := func(method, path, body string) (int, string) {
		req, err := http.NewRequest(method, srv.URL+"/debug/failpoints"+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b := new(strings.Builder)
		_, _ = io.Copy(b, resp.Body)
		return resp.StatusCode, b.String()
	}
	steps := []struct {
		method, path, body string
		wantCode           int
		wantBody           string
	}{
		{"GET", "", "", 200, ""},
		{"PUT", "/before-ack", "2*crash", 204, ""},
		{"PUT", "/after-commit", "sleep(1ms)", 204, ""},
		{"GET", "", "", 200, "after-commit=sleep(1ms)\nbefore-ack=2*crash\n"},
		{"PUT", "/before-ack", "boom", 400, ""},
		{"PUT", "/nowhere", "crash", 400, ""},
		{"DELETE", "/after-commit", "", 204, ""},
		{"DELETE", "/nowhere", "", 404, ""},
		{"POST", "/before-ack", "", 405, ""},
		{"GET", "/", "", 200, "before-ack=2*crash\n"},
	}
	for _, s := range steps {
		code, body := do(s.method, s.path, s.body)
		if code != s.wantCode || (s.wantCode == 200 && body != s.wantBody) {
			t.Errorf("%s %s %q: %d %q, want %d %q", s.method, s.path, s.body, code, body, s.wantCode, s.wantBody)
		}
	}
	r.Hit(BeforeAck)
	if *crashes != 1 {
		t.Errorf("the failpoint armed over HTTP did not fire")
	}
}
