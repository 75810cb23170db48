package authn

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
)

// The apiserver's delegating authenticator/authorizer post reviews through
// AuthenticationV1().RESTClient() / AuthorizationV1().RESTClient(), which
// the fake clientset leaves nil. fakeAPI therefore serves a real clientset's
// HTTP calls from a fake clientset, so tests still use reactors on "create"
// "tokenreviews" / "subjectaccessreviews" and count them via Actions().
type fakeAPI struct {
	*fake.Clientset
}

func newFakeAPI(t *testing.T) (*fakeAPI, kubernetes.Interface) {
	t.Helper()
	f := &fakeAPI{Clientset: fake.NewClientset()}
	client, err := kubernetes.NewForConfig(&rest.Config{
		Host:      "http://fake-apiserver.invalid",
		Transport: f,
		QPS:       -1, // no client-side throttling in tests
	})
	if err != nil {
		t.Fatalf("building client: %v", err)
	}
	return f, client
}

// errTransport makes RoundTrip fail like an unreachable API server.
var errTransport = errors.New("dial tcp: connection refused")

func (f *fakeAPI) RoundTrip(req *http.Request) (*http.Response, error) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, err
	}
	var (
		obj runtime.Object
		gvk metav1.TypeMeta
	)
	switch req.URL.Path {
	case "/apis/authentication.k8s.io/v1/tokenreviews":
		in := &authenticationv1.TokenReview{}
		if err := json.Unmarshal(body, in); err != nil {
			return nil, fmt.Errorf("decoding TokenReview: %w", err)
		}
		obj, err = f.AuthenticationV1().TokenReviews().Create(req.Context(), in, metav1.CreateOptions{})
		gvk = metav1.TypeMeta{APIVersion: "authentication.k8s.io/v1", Kind: "TokenReview"}
	case "/apis/authorization.k8s.io/v1/subjectaccessreviews":
		in := &authorizationv1.SubjectAccessReview{}
		if err := json.Unmarshal(body, in); err != nil {
			return nil, fmt.Errorf("decoding SubjectAccessReview: %w", err)
		}
		obj, err = f.AuthorizationV1().SubjectAccessReviews().Create(req.Context(), in, metav1.CreateOptions{})
		gvk = metav1.TypeMeta{APIVersion: "authorization.k8s.io/v1", Kind: "SubjectAccessReview"}
	default:
		err = apierrors.NewNotFound(schema.GroupResource{Resource: "unknown"}, req.URL.Path)
	}
	if err != nil {
		var st apierrors.APIStatus
		if !errors.As(err, &st) {
			return nil, err
		}
		s := st.Status()
		s.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}
		return jsonResponse(req, int(s.Code), &s)
	}
	switch o := obj.(type) {
	case *authenticationv1.TokenReview:
		o.TypeMeta = gvk
	case *authorizationv1.SubjectAccessReview:
		o.TypeMeta = gvk
	}
	return jsonResponse(req, http.StatusCreated, obj)
}

func jsonResponse(req *http.Request, code int, v any) (*http.Response, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return &http.Response{
		StatusCode: code,
		Header:     http.Header{"Content-Type": []string{"application/json"}},
		Body:       io.NopCloser(bytes.NewReader(b)),
		Request:    req,
	}, nil
}

// count returns how many "create" actions hit resource.
func (f *fakeAPI) count(resource string) int {
	n := 0
	for _, a := range f.Actions() {
		if a.GetVerb() == "create" && a.GetResource().Resource == resource {
			n++
		}
	}
	return n
}

// lastSAR returns the most recent SubjectAccessReview sent.
func (f *fakeAPI) lastSAR() *authorizationv1.SubjectAccessReview {
	var sar *authorizationv1.SubjectAccessReview
	for _, a := range f.Actions() {
		if ca, ok := a.(k8stesting.CreateAction); ok && a.GetResource().Resource == "subjectaccessreviews" {
			sar = ca.GetObject().(*authorizationv1.SubjectAccessReview)
		}
	}
	return sar
}

// lastTokenReview returns the most recent TokenReview sent.
func (f *fakeAPI) lastTokenReview() *authenticationv1.TokenReview {
	var tr *authenticationv1.TokenReview
	for _, a := range f.Actions() {
		if ca, ok := a.(k8stesting.CreateAction); ok && a.GetResource().Resource == "tokenreviews" {
			tr = ca.GetObject().(*authenticationv1.TokenReview)
		}
	}
	return tr
}
