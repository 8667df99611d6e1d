# The pipeline's image for Kubeflow Pipelines (and, via --sdk_container_image, Beam workers):
# TFX 1.16's image plus this package, installed (not editable) with the pins `make venv` uses.
#
# Build and push from the repository root, then compile with the same tag:
#   docker build -t REGISTRY/nmt-fra-eng:TAG .
#   docker push REGISTRY/nmt-fra-eng:TAG
#   nmt kubeflow compile --image REGISTRY/nmt-fra-eng:TAG ...
FROM gcr.io/tfx-oss-public/tfx:1.16.0

# tensorflow[and-cuda] keeps TF at the tested 2.16.2 and brings the CUDA/cuDNN libraries it
# was built against as wheels, so the Trainer finds the GPU whatever CUDA the base image has.
# tensorflow-text 2.16.1 and the rest come from setup.py, pinned by constraints.txt.
# --ignore-requires-python: tfx 1.16.0 declares Python <3.11 (harmless on the image's 3.10).
COPY . /opt/nmt-src
RUN python -m pip install --no-cache-dir --ignore-requires-python \
        -c /opt/nmt-src/constraints.txt /opt/nmt-src "tensorflow[and-cuda]==2.16.2"

# The compiled pipeline names the schema by this path (kubeflow_runner.IMAGE_SCHEMA_FILE).
COPY schemas/schema.pbtxt /pipeline/schema.pbtxt
