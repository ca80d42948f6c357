"""The bare endpoint of figure 7: DRF parses the JSON body, validates it and inserts one row."""

from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from bench.benchapp.models import BenchRow


class BareInsertApi(APIView):
    class InputSerializer(serializers.Serializer):
        customer_id = serializers.CharField(max_length=255)
        items = serializers.ListField(min_length=1, max_length=50)
        payment_token = serializers.CharField(max_length=255)

    def post(self, request):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        row = BenchRow.objects.create(customer_id=serializer.validated_data["customer_id"], payload=request.data)
        return Response({"id": row.id}, status=status.HTTP_201_CREATED)
