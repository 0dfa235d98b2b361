import { BadRequestException, Body, Controller, Get, NotFoundException, Param, ParseIntPipe, Post } from '@nestjs/common';
import { OrdersService, type CreateOrderDto } from './orders.service';

@Controller('orders')
export class OrdersController {
  constructor(private readonly orders: OrdersService) {}

  @Post()
  async create(@Body() body: Partial<CreateOrderDto>) {
    if (typeof body?.customer !== 'string' || body.customer.length === 0) throw new BadRequestException('customer is required');
    if (!Number.isInteger(body.amountCents) || (body.amountCents as number) <= 0) {
      throw new BadRequestException('amountCents must be a positive integer');
    }
    return this.orders.create({ customer: body.customer, amountCents: body.amountCents as number });
  }

  @Get(':id')
  async get(@Param('id', ParseIntPipe) id: number) {
    const order = await this.orders.find(id);
    if (!order) throw new NotFoundException();
    return order;
  }
}
